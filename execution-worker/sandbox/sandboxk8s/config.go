package sandboxk8s

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mangohq/mango/execution-worker/internal/defaults"
	"github.com/mangohq/mango/execution-worker/internal/httpcall"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/internal/envconf"
)

// Name is the name the Kubernetes Agent Sandbox provider is registered under.
const Name = "k8s"

// Environment variables read by [ConfigFromEnv].
const (
	EnvNamespace    = "MANGO_K8S_NAMESPACE"
	EnvWarmPool     = "MANGO_K8S_WARM_POOL"
	EnvImage        = "MANGO_K8S_IMAGE"
	EnvRouterURL    = "MANGO_K8S_ROUTER_URL"
	EnvRouterToken  = "MANGO_K8S_ROUTER_TOKEN"
	EnvRuntimePort  = "MANGO_K8S_RUNTIME_PORT"
	EnvKubeconfig   = "MANGO_K8S_KUBECONFIG"
	EnvReadyTimeout = "MANGO_K8S_READY_TIMEOUT"
	EnvExecTimeout  = sandbox.EnvExecTimeout
	EnvMaxOutput    = sandbox.EnvMaxOutput
)

// Defaults of [Config].
const (
	DefaultNamespace    = "default"
	DefaultRuntimePort  = 8888
	DefaultReadyTimeout = 5 * time.Minute
	DefaultExecTimeout  = sandbox.DefaultExecTimeout
	DefaultMaxOutput    = sandbox.DefaultMaxOutput
	DefaultPageSize     = 100
)

// Config configures the provider. A zero field takes its default.
type Config struct {
	// Namespace holds the provider's resources (MANGO_K8S_NAMESPACE,
	// default "default").
	Namespace string
	// WarmPool is the SandboxWarmPool a SandboxClaim is made against
	// (MANGO_K8S_WARM_POOL); the pool names the SandboxTemplate. Exclusive
	// with Image; one of them is required.
	WarmPool string
	// Image is the runtime image of a Sandbox made directly, without a
	// claim (MANGO_K8S_IMAGE). It must serve the agent-sandbox runtime API
	// on RuntimePort. A Spec.Image overrides it.
	Image string
	// RouterURL is the sandbox router's base URL (MANGO_K8S_ROUTER_URL,
	// required), for example http://sandbox-router-svc.agent-sandbox:8080.
	RouterURL string
	// RouterToken, when set, is sent to the router as a Bearer token
	// (MANGO_K8S_ROUTER_TOKEN), for a router with --authz-mode=tokenreview.
	RouterToken string
	// RuntimePort is the port of the runtime in the pod, sent as
	// X-Sandbox-Port (MANGO_K8S_RUNTIME_PORT, default 8888).
	RuntimePort int
	// Kubeconfig is a kubeconfig file (MANGO_K8S_KUBECONFIG; empty:
	// KUBECONFIG, ~/.kube/config, then the in-cluster service account).
	Kubeconfig string
	// ReadyTimeout bounds waiting for the Ready condition
	// (MANGO_K8S_READY_TIMEOUT, default 5m).
	ReadyTimeout time.Duration
	// ExecTimeout is the default command timeout.
	ExecTimeout time.Duration
	// MaxOutput is the default cap of stdout and stderr, each, in bytes.
	MaxOutput int
	// REST is the cluster connection (default: loaded from Kubeconfig).
	REST *rest.Config
	// HTTPClient is the router client (default: a client without an
	// overall timeout; contexts bound the calls).
	HTTPClient *http.Client
	// PollInterval is the first interval between readiness polls (default
	// 250ms, doubling up to 2s).
	PollInterval time.Duration
	// RetryBase is the first backoff of a retried request (default 200ms);
	// RetryMax caps it (default 5s); Retries is the number of retries
	// (default 4).
	RetryBase, RetryMax time.Duration
	Retries             int
	// PageSize is the limit of one list request (default 100).
	PageSize int
	// Labels are extra labels put on every resource (tests use them).
	Labels map[string]string
	// Installation is the installation id every resource is labelled with
	// (required; see [sandbox.ValidateInstallation]).
	Installation string
}

// Factory is the registry entry for the provider. Sandboxes are remote and
// reachable from any worker of the cluster. Configure reads
// [ConfigFromEnv]; its Build loads the cluster configuration and does not
// contact the cluster.
var Factory = sandbox.Factory{
	Traits:    sandbox.Traits{RunsOnHost: false, HostBound: false},
	Configure: sandbox.FromEnv(ConfigFromEnv, New, func(c *Config, id string) { c.Installation = id }),
}

// envVars are the provider's variables as env reads them.
type envVars struct {
	Namespace    string        `env:"MANGO_K8S_NAMESPACE"`
	WarmPool     string        `env:"MANGO_K8S_WARM_POOL"`
	Image        string        `env:"MANGO_K8S_IMAGE"`
	RouterURL    string        `env:"MANGO_K8S_ROUTER_URL"`
	RouterToken  string        `env:"MANGO_K8S_ROUTER_TOKEN"`
	RuntimePort  int           `env:"MANGO_K8S_RUNTIME_PORT"`
	Kubeconfig   string        `env:"MANGO_K8S_KUBECONFIG"`
	ReadyTimeout time.Duration `env:"MANGO_K8S_READY_TIMEOUT"`
}

// envWant says what each variable wants, for a value refused.
var envWant = map[string]string{
	EnvRuntimePort:  "want a port number",
	EnvReadyTimeout: "want a positive duration such as 5m",
}

// envParsers parse the variables' types, refusing values out of range.
var envParsers = envconf.Parsers{
	reflect.TypeFor[int](): func(v string) (any, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			return nil, errors.New("not a port")
		}
		return n, nil
	},
	reflect.TypeFor[time.Duration](): sandbox.PositiveDuration,
}

// ConfigFromEnv reads the configuration through getenv. The error names
// every missing or invalid variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var v envVars
	errs := sandbox.ReadEnv(&v, getenv, envWant, envParsers)
	cfg := Config{
		Namespace: v.Namespace, WarmPool: v.WarmPool, Image: v.Image, RouterURL: v.RouterURL,
		RouterToken: v.RouterToken, Kubeconfig: v.Kubeconfig, RuntimePort: v.RuntimePort, ReadyTimeout: v.ReadyTimeout,
	}
	if cfg.RouterURL == "" {
		errs = append(errs, fmt.Errorf("%s is required for the %s sandbox provider (the sandbox router's base URL)", EnvRouterURL, Name))
	} else if err := checkURL(cfg.RouterURL); err != nil {
		errs = append(errs, fmt.Errorf("%s=%q: %w", EnvRouterURL, cfg.RouterURL, err))
	}
	switch {
	case cfg.WarmPool == "" && cfg.Image == "":
		errs = append(errs, fmt.Errorf("%s or %s is required for the %s sandbox provider", EnvWarmPool, EnvImage, Name))
	case cfg.WarmPool != "" && cfg.Image != "":
		errs = append(errs, fmt.Errorf("%s and %s are exclusive: set one", EnvWarmPool, EnvImage))
	}
	if cfg.WarmPool != "" && !dnsSubdomain(cfg.WarmPool) {
		errs = append(errs, fmt.Errorf("%s=%q: want a Kubernetes object name", EnvWarmPool, cfg.WarmPool))
	}
	if cfg.Namespace != "" && !dnsLabel(cfg.Namespace) {
		errs = append(errs, fmt.Errorf("%s=%q: want a Kubernetes namespace name", EnvNamespace, cfg.Namespace))
	}
	if cfg.Kubeconfig != "" {
		if _, err := os.Stat(cfg.Kubeconfig); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", EnvKubeconfig, cfg.Kubeconfig, err))
		}
	}
	errs = append(errs, sandbox.ReadLimits(getenv, &cfg.ExecTimeout, &cfg.MaxOutput))
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func checkURL(v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("want an http:// or https:// URL")
	}
	return nil
}

// dnsLabel reports whether s is an RFC 1123 label (namespace and
// sandbox names, and what the router accepts in X-Sandbox-ID).
func dnsLabel(s string) bool { return len(validation.IsDNS1123Label(s)) == 0 }

// dnsSubdomain reports whether s is an RFC 1123 subdomain (object names).
func dnsSubdomain(s string) bool {
	if len(s) > 253 {
		return false
	}
	for part := range strings.SplitSeq(s, ".") {
		if !dnsLabel(part) {
			return false
		}
	}
	return true
}

// restConfig loads the cluster configuration: the kubeconfig named by
// Kubeconfig, else clientcmd's defaults (KUBECONFIG, ~/.kube/config), else
// the in-cluster service account. It reads files but contacts nothing.
func (c Config) restConfig() (*rest.Config, error) {
	if c.REST != nil {
		return rest.CopyConfig(c.REST), nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if c.Kubeconfig != "" {
		rules.ExplicitPath = c.Kubeconfig
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no usable Kubernetes cluster configuration for the %s sandbox provider (set %s or KUBECONFIG, or run in a cluster): %w", Name, EnvKubeconfig, err)
	}
	return rc, nil
}

func (c Config) withDefaults() Config {
	c.Namespace = cmp.Or(c.Namespace, DefaultNamespace)
	c.RouterURL = strings.TrimRight(c.RouterURL, "/")
	c.RuntimePort = defaults.Positive(c.RuntimePort, DefaultRuntimePort)
	c.ReadyTimeout = defaults.Positive(c.ReadyTimeout, DefaultReadyTimeout)
	c.ExecTimeout = defaults.Positive(c.ExecTimeout, DefaultExecTimeout)
	c.MaxOutput = defaults.Positive(c.MaxOutput, DefaultMaxOutput)
	c.PollInterval = defaults.Positive(c.PollInterval, 250*time.Millisecond)
	c.RetryBase = defaults.Positive(c.RetryBase, httpcall.DefaultBase)
	c.RetryMax = defaults.Positive(c.RetryMax, httpcall.DefaultMax)
	c.Retries = defaults.Positive(c.Retries, httpcall.DefaultRetries)
	c.PageSize = defaults.Positive(c.PageSize, DefaultPageSize)
	c.HTTPClient = cmp.Or(c.HTTPClient, &http.Client{})
	return c
}
