package sandbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxopensandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxopensandbox/opensandboxfake"
)

// osbWorker returns a SessionManager over a new OpenSandbox provider client
// of fake, as a (re)started worker would have. Package installs run marker
// commands instead of real package managers (the fake's sandboxes are
// processes on this host).
func (e *managerEnv) osbWorker(t *testing.T, fake *opensandboxfake.Server) *sandbox.SessionManager {
	t.Helper()
	p, err := sandboxopensandbox.New(sandboxopensandbox.Config{Domain: fake.Host(), PollInterval: 5 * time.Millisecond, Installation: e.installation,
		RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m := sandbox.NewSessionManager(p, e.bindings, "mango.opensandbox")
	m.SetInstaller(markerInstall, time.Minute)
	return m
}

// markerInstall "installs" each manager's packages by writing a marker
// file, or fails for a package named "missing".
func markerInstall(p *sandbox.Packages) []sandbox.InstallStep {
	var steps []sandbox.InstallStep
	for _, st := range p.InstallSteps() {
		cmd := "echo " + sandbox.ShellQuote(st.Command) + " >> installed.log"
		if strings.Contains(st.Command, "'missing'") {
			cmd = "echo 'E: Unable to locate package missing' >&2; exit 100"
		}
		steps = append(steps, sandbox.InstallStep{Manager: st.Manager, Command: ": MARKER " + st.Manager + "; " + cmd})
	}
	return steps
}

func TestLimitedEgressLifecycle(t *testing.T) {
	t.Parallel()
	env := newManagerEnv(t)
	fake := opensandboxfake.New(t)
	ctx := context.Background()
	session := env.server.NewSession(t, "")
	final := []string{"api.example.com", "*.corp.example"}
	spec := sandbox.Spec{
		Network:  &sandbox.Network{AllowedHosts: sandbox.SortHosts(final)},
		Packages: &sandbox.Packages{Pip: []string{"requests==2.32.3"}, Npm: []string{"left-pad"}},
	}

	m := env.osbWorker(t, fake)
	sb, err := m.Acquire(ctx, session, spec)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	id := sb.Ref().ID
	if _, err := sb.Exec(ctx, sandbox.ExecRequest{Command: "echo tool"}); err != nil {
		t.Fatal(err)
	}

	// The sandbox starts deny-by-default, widened to the registries of the
	// managers in use, installs under that, then enforces exactly the
	// allowed hosts.
	widened := sandbox.SortHosts(append(slices.Clone(final), "pypi.org", "files.pythonhosted.org", "registry.npmjs.org"))
	pols := checkCreationPolicies(t, fake, id, widened, final)
	checkCommandPolicies(t, fake, id, widened, final)
	log, err := sb.ReadFile(ctx, "installed.log")
	if err != nil || !strings.Contains(string(log), "pip install") || !strings.Contains(string(log), "'requests==2.32.3'") ||
		!strings.Contains(string(log), "npm install -g") {
		t.Errorf("installed.log = %q, %v", log, err)
	}
	if b, err := env.bindings.GetBinding(ctx, session); err != nil || b.ExternalID != id {
		t.Fatalf("binding = %+v, %v", b, err)
	}

	// The same policy again is not re-sent.
	if _, err := m.Acquire(ctx, session, spec); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Policies(id)); n != len(pols) {
		t.Errorf("an unchanged policy was posted again (%d policies, want %d)", n, len(pols))
	}

	// An MCP-affecting session update changes the allowed hosts: the next
	// acquire applies them.
	withMCP := spec
	withMCP.Network = &sandbox.Network{AllowedHosts: sandbox.SortHosts(append(slices.Clone(final), "mcp.example.com"))}
	if _, err := m.Acquire(ctx, session, withMCP); err != nil {
		t.Fatal(err)
	}
	pols = fake.Policies(id)
	if got := pols[len(pols)-1].Allowed(); !slices.Equal(got, withMCP.Network.AllowedHosts) {
		t.Errorf("policy after the update allows %v, want %v", got, withMCP.Network.AllowedHosts)
	}

	// A restarted worker re-applies the policy when it re-attaches, and
	// installs nothing again.
	before := len(pols)
	restarted := env.osbWorker(t, fake)
	sb2, err := restarted.Acquire(ctx, session, withMCP)
	if err != nil || sb2.Ref().ID != id {
		t.Fatalf("acquire after restart = %v, %v", sb2, err)
	}
	pols = fake.Policies(id)
	if len(pols) != before+1 || !slices.Equal(pols[len(pols)-1].Allowed(), withMCP.Network.AllowedHosts) {
		t.Errorf("after restart: %d policies (want %d), last allows %v", len(pols), before+1, pols[len(pols)-1].Allowed())
	}
	installs := 0
	for _, c := range fake.Commands(id) {
		if strings.Contains(c.Command, "MARKER") {
			installs++
		}
	}
	if installs != 2 {
		t.Errorf("packages installed %d times after the restart, want still 2", installs)
	}
}

// checkCreationPolicies checks that every policy of sandbox id denies by
// default, the first allows widened (the allowed hosts and the
// registries), and the last exactly final. It returns the policies.
func checkCreationPolicies(t *testing.T, fake *opensandboxfake.Server, id string, widened, final []string) []opensandboxfake.Policy {
	t.Helper()
	pols := fake.Policies(id)
	if len(pols) < 2 {
		t.Fatalf("policies = %+v, want the creation policy then the final one", pols)
	}
	for i, p := range pols {
		if p.DefaultAction != "deny" {
			t.Errorf("policy %d default = %q, want deny", i, p.DefaultAction)
		}
	}
	if got := pols[0].Allowed(); !slices.Equal(got, widened) {
		t.Errorf("creation policy allows %v, want %v (allowed hosts + registries)", got, widened)
	}
	last := pols[len(pols)-1]
	if got := last.Allowed(); !slices.Equal(got, sandbox.SortHosts(final)) {
		t.Errorf("final policy allows %v, want exactly %v", got, sandbox.SortHosts(final))
	}
	return pols
}

// checkCommandPolicies checks that the two installs of sandbox id ran
// under the widened policy and the one tool command under the final one.
func checkCommandPolicies(t *testing.T, fake *opensandboxfake.Server, id string, widened, final []string) {
	t.Helper()
	var installs, tools int
	for _, c := range fake.Commands(id) {
		switch {
		case strings.Contains(c.Command, "MARKER"):
			installs++
			if c.Policy == nil || !slices.Equal(c.Policy.Allowed(), widened) {
				t.Errorf("install %q ran under %+v, want the widened policy", c.Command, c.Policy)
			}
		case strings.Contains(c.Command, "echo tool"):
			tools++
			if c.Policy == nil || !slices.Equal(c.Policy.Allowed(), sandbox.SortHosts(final)) {
				t.Errorf("tool command ran under %+v, want the final policy", c.Policy)
			}
		}
	}
	if installs != 2 || tools != 1 {
		t.Errorf("ran %d install and %d tool commands, want 2 and 1", installs, tools)
	}
}

func TestLimitedEgressWithoutPackages(t *testing.T) {
	t.Parallel()
	env := newManagerEnv(t)
	fake := opensandboxfake.New(t)
	ctx := context.Background()
	session := env.server.NewSession(t, "")
	spec := sandbox.Spec{Network: &sandbox.Network{AllowedHosts: []string{}}}
	sb, err := env.osbWorker(t, fake).Acquire(ctx, session, spec)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range fake.Policies(sb.Ref().ID) {
		if p.DefaultAction != "deny" || len(p.Allowed()) != 0 {
			t.Errorf("policy %d = %+v, want deny everything from the start", i, p)
		}
	}
}

func TestPackageInstallFailure(t *testing.T) {
	t.Parallel()
	env := newManagerEnv(t)
	fake := opensandboxfake.New(t)
	ctx := context.Background()
	session := env.server.NewSession(t, "")
	spec := sandbox.Spec{Network: &sandbox.Network{AllowedHosts: []string{"api.example.com"}},
		Packages: &sandbox.Packages{Apt: []string{"missing"}}}
	_, err := env.osbWorker(t, fake).Acquire(ctx, session, spec)
	var pe *sandbox.ProvisionError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "apt packages failed with exit code 100") ||
		!strings.Contains(err.Error(), "Unable to locate package missing") {
		t.Fatalf("acquire = %v, want a ProvisionError naming the apt failure and its output", err)
	}
	// Not published: the binding is still only an intent.
	if b, err := env.bindings.GetBinding(ctx, session); err != nil || b.ExternalID != "" {
		t.Errorf("binding after a failed install = %+v, %v; want the intent only", b, err)
	}
}

func TestProvisionRefusals(t *testing.T) {
	t.Parallel()
	env := newManagerEnv(t)
	ctx := context.Background()
	p, err := sandboxlocal.New(sandboxlocal.Config{Root: env.root, Installation: env.installation})
	if err != nil {
		t.Fatal(err)
	}
	m := sandbox.NewSessionManager(p, env.bindings, "mango.local.a")
	for _, tt := range []struct {
		name string
		spec sandbox.Spec
		want string
	}{
		{"limited networking", sandbox.Spec{Network: &sandbox.Network{}}, "the local provider cannot enforce egress rules"},
		{"packages", sandbox.Spec{Packages: &sandbox.Packages{Pip: []string{"x"}}}, "the local provider does not install packages"},
	} {
		session := env.server.NewSession(t, "")
		_, err := m.Acquire(ctx, session, tt.spec)
		var pe *sandbox.ProvisionError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: acquire = %v, want a ProvisionError containing %q", tt.name, err, tt.want)
		}
		if _, err := env.bindings.GetBinding(ctx, session); !errors.Is(err, sandbox.ErrNoBinding) {
			t.Errorf("%s: binding = %v, want none (nothing created)", tt.name, err)
		}
	}
}

func TestInstallSteps(t *testing.T) {
	p := &sandbox.Packages{Pip: []string{"a==1", "it's"}, Apt: []string{"curl"}, Go: []string{"golang.org/x/tools/cmd/goimports@latest"}}
	steps := p.InstallSteps()
	var managers []string
	for _, s := range steps {
		managers = append(managers, s.Manager)
	}
	if !slices.Equal(managers, []string{"apt", "go", "pip"}) {
		t.Fatalf("managers = %v, want apt, go, pip (apt first)", managers)
	}
	if !strings.HasSuffix(steps[2].Command, `install --no-input --disable-pip-version-check 'a==1' 'it'\''s'`) {
		t.Errorf("pip command = %q: specifiers not quoted as single words", steps[2].Command)
	}
	if got := p.Registries(); !slices.Equal(got, []string{"archive.ubuntu.com", "deb.debian.org", "files.pythonhosted.org",
		"ports.ubuntu.com", "proxy.golang.org", "pypi.org", "security.debian.org", "security.ubuntu.com", "sum.golang.org"}) {
		t.Errorf("registries = %v", got)
	}
	if (&sandbox.Packages{}).InstallSteps() != nil || !(*sandbox.Packages)(nil).Empty() {
		t.Error("no packages should mean no steps")
	}
}
