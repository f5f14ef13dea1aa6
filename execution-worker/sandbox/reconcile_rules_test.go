package sandbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxtest"
)

// listedProvider lists whatever it holds, whichever installation it is
// labelled for (a provider whose List failed to filter), and records what
// is destroyed: the reconciler's own rules are what is under test.
type listedProvider struct {
	mu        sync.Mutex
	owned     []sandbox.Owned
	destroyed []sandbox.Ref
}

func (*listedProvider) Name() string { return "listed" }

func (*listedProvider) Create(context.Context, string, sandbox.Spec) (sandbox.Sandbox, sandbox.Ref, error) {
	return nil, sandbox.Ref{}, errors.New("not used")
}

func (*listedProvider) Attach(context.Context, string, sandbox.Ref) (sandbox.Sandbox, error) {
	return nil, errors.New("not used")
}

func (p *listedProvider) List(context.Context) ([]sandbox.Owned, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.owned), nil
}

func (p *listedProvider) DestroyRef(_ context.Context, ref sandbox.Ref) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.destroyed = append(p.destroyed, ref)
	p.owned = slices.DeleteFunc(p.owned, func(o sandbox.Owned) bool { return o.Ref == ref })
	return nil
}

// TestReconcilerInstallationRules: a pass destroys only resources of its
// own installation that nothing references; it adopts legacy resources
// (no installation id) that a binding or intent references, reports the
// other legacy ones without destroying them, and never touches, binds or
// reports a resource of another installation, even one labelled with the
// key hash of one of its own intents.
func TestReconcilerInstallationRules(t *testing.T) {
	t.Parallel()
	const ours, theirs = "inst-ours", "inst-theirs"
	old := time.Now().Add(-time.Hour)
	ref := func(id string) sandbox.Ref { return sandbox.Ref{Provider: "listed", ID: id} }
	res := func(id, session, installation string, created time.Time) sandbox.Owned {
		return sandbox.Owned{Ref: ref(id), KeyHash: sandbox.KeyHash(session), Installation: installation, CreatedAt: created}
	}
	p := &listedProvider{owned: []sandbox.Owned{
		res("own-bound", "sesn_bound", ours, old),
		res("own-intent", "sesn_intent", ours, old),
		res("own-orphan", "sesn_orphan", ours, old),
		res("own-young", "sesn_young", ours, time.Now()),
		res("own-duplicate", "sesn_bound", ours, old),
		res("legacy-bound", "sesn_legacy_bound", "", old),
		res("legacy-intent", "sesn_legacy_intent", "", old),
		res("legacy-orphan", "sesn_legacy_orphan", "", old),
		res("legacy-duplicate", "sesn_bound", "", old),
		res("theirs-orphan", "sesn_their_orphan", theirs, old),
		res("theirs-same-key", "sesn_foreign_key", theirs, old),
	}}
	binding := func(session, externalID string) sandbox.Binding {
		return sandbox.Binding{SessionID: session, Provider: "listed", ExternalID: externalID, TaskQueue: "q"}
	}
	b := sandboxtest.NewBindings(
		binding("sesn_bound", "own-bound"),
		binding("sesn_intent", ""),
		binding("sesn_legacy_bound", "legacy-bound"),
		binding("sesn_legacy_intent", ""),
		binding("sesn_foreign_key", ""),
	)
	r := &sandbox.Reconciler{Provider: p, Bindings: b, Installation: ours, TaskQueue: "q", Grace: time.Minute}

	for pass := range 3 {
		got, err := r.RunOnce(context.Background())
		if err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		ids := func(refs []sandbox.Ref) string {
			var s []string
			for _, r := range refs {
				s = append(s, r.ID)
			}
			slices.Sort(s)
			return strings.Join(s, ",")
		}
		want := struct{ destroyed, bound, unclaimed string }{"own-duplicate,own-orphan", "legacy-intent,own-intent", "legacy-duplicate,legacy-orphan"}
		if pass > 0 {
			want.destroyed, want.bound = "", ""
		}
		if d := ids(got.Destroyed); d != want.destroyed {
			t.Errorf("pass %d destroyed %q, want %q", pass, d, want.destroyed)
		}
		if d := ids(got.Bound); d != want.bound {
			t.Errorf("pass %d bound %q, want %q", pass, d, want.bound)
		}
		if d := ids(got.Unclaimed); d != want.unclaimed {
			t.Errorf("pass %d reported unclaimed %q, want %q", pass, d, want.unclaimed)
		}
	}
	if n := r.Unclaimed(); n != 2 {
		t.Errorf("Unclaimed() = %d after the passes, want the 2 legacy resources left alone", n)
	}
	if d := p.destroyed; len(d) != 2 {
		t.Errorf("DestroyRef called on %v, want only the two orphans of this installation", d)
	}
	for session, want := range map[string]string{"sesn_intent": "own-intent", "sesn_legacy_intent": "legacy-intent", "sesn_foreign_key": ""} {
		if got := b.Binding(session).ExternalID; got != want {
			t.Errorf("binding of %s names %q, want %q", session, got, want)
		}
	}
}

// TestReconcilerWithoutInstallation: a reconciler that was not told its
// installation destroys nothing labelled and reports legacy resources.
func TestReconcilerWithoutInstallation(t *testing.T) {
	t.Parallel()
	old := time.Now().Add(-time.Hour)
	p := &listedProvider{owned: []sandbox.Owned{
		{Ref: sandbox.Ref{Provider: "listed", ID: "labelled"}, KeyHash: sandbox.KeyHash("a"), Installation: "inst-x", CreatedAt: old},
		{Ref: sandbox.Ref{Provider: "listed", ID: "legacy"}, KeyHash: sandbox.KeyHash("b"), CreatedAt: old},
	}}
	r := &sandbox.Reconciler{Provider: p, Bindings: sandboxtest.NewBindings()}
	got, err := r.RunOnce(context.Background())
	if err != nil || len(got.Destroyed) != 0 || len(got.Unclaimed) != 1 || len(p.destroyed) != 0 {
		t.Errorf("RunOnce = %+v, %v (destroyed %v); want nothing destroyed and the legacy resource reported", got, err, p.destroyed)
	}
}

var (
	_ sandbox.Lister    = (*listedProvider)(nil)
	_ sandbox.Destroyer = (*listedProvider)(nil)
)
