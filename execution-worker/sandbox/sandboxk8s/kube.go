package sandboxk8s

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/mangohq/mango/execution-worker/internal/httpcall"
)

// kind is one of the two resources the provider makes.
type kind struct {
	// ref prefixes the resource name in a Ref ID.
	ref string
	// gvr addresses the resource; apiVersion and name are its
	// apiVersion and Kind.
	gvr              schema.GroupVersionResource
	apiVersion, name string
}

var (
	// sandboxKind is agents.x-k8s.io/v1beta1 Sandbox.
	sandboxKind = &kind{
		ref:        "sandbox",
		gvr:        schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"},
		apiVersion: "agents.x-k8s.io/v1beta1",
		name:       "Sandbox",
	}
	// claimKind is extensions.agents.x-k8s.io/v1beta1 SandboxClaim.
	claimKind = &kind{
		ref:        "sandboxclaim",
		gvr:        schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxclaims"},
		apiVersion: "extensions.agents.x-k8s.io/v1beta1",
		name:       "SandboxClaim",
	}
)

// refID is the Ref ID of a resource: "sandbox/NAME" or "sandboxclaim/NAME".
func (k *kind) refID(name string) string { return k.ref + "/" + name }

// parseRefID splits a Ref ID.
func parseRefID(id string) (*kind, string, bool) {
	prefix, name, ok := strings.Cut(id, "/")
	if !ok || !dnsSubdomain(name) {
		return nil, "", false
	}
	for _, k := range []*kind{sandboxKind, claimKind} {
		if k.ref == prefix {
			return k, name, true
		}
	}
	return nil, "", false
}

// condition is a metav1.Condition.
type condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// object is the part of a Sandbox or SandboxClaim the provider reads.
type object struct {
	Metadata struct {
		Name              string            `json:"name"`
		UID               string            `json:"uid"`
		Labels            map[string]string `json:"labels"`
		Annotations       map[string]string `json:"annotations"`
		CreationTimestamp string            `json:"creationTimestamp"`
		DeletionTimestamp *string           `json:"deletionTimestamp"`
	} `json:"metadata"`
	Status struct {
		Conditions []condition `json:"conditions"`
		// PodIPs is a Sandbox's.
		PodIPs []string `json:"podIPs"`
		// Sandbox is a claim's: the Sandbox it was bound to.
		Sandbox struct {
			Name   string   `json:"name"`
			PodIPs []string `json:"podIPs"`
		} `json:"sandbox"`
	} `json:"status"`
}

func (o *object) condition(typ string) (condition, bool) {
	for _, c := range o.Status.Conditions {
		if c.Type == typ {
			return c, true
		}
	}
	return condition{}, false
}

func (o *object) deleting() bool { return o.Metadata.DeletionTimestamp != nil }

// conditions renders the conditions for messages.
func (o *object) conditions() string {
	if len(o.Status.Conditions) == 0 {
		return "none observed"
	}
	parts := make([]string, 0, len(o.Status.Conditions))
	for _, c := range o.Status.Conditions {
		s := c.Type + "=" + c.Status
		if c.Reason != "" {
			s += " (" + c.Reason
			if c.Message != "" {
				s += ": " + c.Message
			}
			s += ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

func toObject(u *unstructured.Unstructured) (*object, error) {
	data, err := u.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformed, err)
	}
	var o object
	if err := json.Unmarshal(data, &o); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errMalformed, u.GetKind(), err)
	}
	if o.Metadata.Name == "" {
		return nil, fmt.Errorf("%w: %s without a name", errMalformed, u.GetKind())
	}
	return &o, nil
}

// errMalformed marks an answer that does not follow the protocol; it is
// never retried.
var errMalformed = httpcall.ErrMalformed

// kube is the Kubernetes API of one namespace.
type kube struct {
	client    dynamic.Interface
	namespace string
	p         *Provider
}

func (c *kube) res(k *kind) dynamic.ResourceInterface {
	return c.client.Resource(k.gvr).Namespace(c.namespace)
}

// get fetches a resource; a missing one is ErrNotFound-like (see isNotFound).
func (c *kube) get(ctx context.Context, k *kind, name string) (*object, error) {
	var o *object
	err := c.p.retry(ctx, "get "+k.name+" "+name, func(ctx context.Context) error {
		u, err := c.res(k).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		o, err = toObject(u)
		return err
	})
	return o, err
}

// list returns the resources matching selector, page by page.
func (c *kube) list(ctx context.Context, k *kind, selector string) ([]*object, error) {
	var all []*object
	cont := ""
	for {
		var page *unstructured.UnstructuredList
		err := c.p.retry(ctx, "list "+k.gvr.Resource, func(ctx context.Context) error {
			var err error
			page, err = c.res(k).List(ctx, metav1.ListOptions{LabelSelector: selector, Limit: int64(c.p.cfg.PageSize), Continue: cont})
			return err
		})
		if err != nil {
			return nil, err
		}
		for i := range page.Items {
			o, err := toObject(&page.Items[i])
			if err != nil {
				return nil, err
			}
			all = append(all, o)
		}
		next := page.GetContinue()
		if next == "" || next == cont {
			return all, nil
		}
		cont = next
	}
}

// create creates obj; the name is deterministic, so a retried create that
// already succeeded answers AlreadyExists, which the caller resolves.
func (c *kube) create(ctx context.Context, k *kind, obj map[string]any) (*object, error) {
	var o *object
	err := c.p.retry(ctx, "create "+k.name, func(ctx context.Context) error {
		u, err := c.res(k).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		o, err = toObject(u)
		return err
	})
	return o, err
}

// delete deletes a resource and, in the background, what it owns (the
// pod, service and, for a claim, the Sandbox). Missing is not an error.
func (c *kube) delete(ctx context.Context, k *kind, name string) error {
	bg := metav1.DeletePropagationBackground
	err := c.p.retry(ctx, "delete "+k.name+" "+name, func(ctx context.Context) error {
		return c.res(k).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg})
	})
	if isNotFound(err) {
		return nil
	}
	return err
}

// isNotFound reports a 404 from the API server.
func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// isAlreadyExists reports a 409 AlreadyExists from the API server.
func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

func isAPIStatus(err error) bool {
	var st apierrors.APIStatus
	return errors.As(err, &st)
}

// retryable reports whether a failed call may be repeated: 429, 5xx, and
// transport failures (every call the provider makes is idempotent). It
// also returns the delay the server asked for.
func retryable(err error) (bool, time.Duration) {
	if errors.Is(err, errMalformed) {
		return false, 0
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		code := int(st.Status().Code)
		if code == 429 || code >= 500 && code != 501 {
			d, _ := apierrors.SuggestsClientDelay(err)
			return true, time.Duration(d) * time.Second
		}
		return false, 0
	}
	var ue *url.Error
	var ne net.Error
	return errors.As(err, &ue) || errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF), 0
}

// retry runs fn until it succeeds, fails for good, or the retries are
// spent, backing off exponentially (or as the server asks, up to 30s).
func (p *Provider) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	return p.retryWith(ctx, what, func(ctx context.Context) (bool, time.Duration, error) {
		err := fn(ctx)
		if err == nil || ctx.Err() != nil {
			return false, 0, err
		}
		ok, wait := retryable(err)
		if !ok && !isAPIStatus(err) && !errors.Is(err, errMalformed) {
			// Neither an API status nor a transport failure: client-go
			// could not decode the answer.
			err = fmt.Errorf("%w: %v", errMalformed, err)
		}
		return ok, wait, err
	})
}

// retryWith is retry with the classification left to fn; what (if not
// empty) prefixes the error.
func (p *Provider) retryWith(ctx context.Context, what string, fn func(context.Context) (retry bool, wait time.Duration, err error)) error {
	policy := httpcall.Policy{Base: p.cfg.RetryBase, Max: p.cfg.RetryMax, Retries: p.cfg.Retries}
	attempts, gaveUp, err := httpcall.Retry(ctx, policy, fn)
	switch {
	case err == nil || ctx.Err() != nil:
		return err
	case gaveUp && what == "":
		return fmt.Errorf("giving up after %d attempts: %w", attempts, err)
	case gaveUp:
		return fmt.Errorf("%s: giving up after %d attempts: %w", what, attempts, err)
	case what == "":
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}
