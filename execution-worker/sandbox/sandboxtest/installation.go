package sandboxtest

import (
	"errors"
	"slices"
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// reconcilePasses is how many reconciliation passes each installation
// makes: the first acts, the later ones must find nothing left to do.
const reconcilePasses = 3

func bound(p sandbox.Provider, key string, ref sandbox.Ref) sandbox.Binding {
	return sandbox.Binding{SessionID: key, Provider: p.Name(), ExternalID: ref.ID, TaskQueue: "mango.conformance"}
}

// reconciler returns a reconciler of installation over b that spares
// nothing for its age.
func reconciler(p sandbox.Provider, b *Bindings, installation string) *sandbox.Reconciler {
	return &sandbox.Reconciler{Provider: p, Bindings: b, Installation: installation, TaskQueue: "mango.conformance"}
}

// canReconcile reports whether p can be reconciled (lists and destroys).
func canReconcile(p sandbox.Provider) bool {
	_, l := p.(sandbox.Lister)
	_, d := p.(sandbox.Destroyer)
	return l && d
}

// testInstallationsApart: two installations sharing the backend. Neither
// attaches nor lists the other's sandboxes, DestroyRef refuses the other's,
// reconciliation passes of both destroy only an orphan of the installation
// that made it, every bound sandbox of both survives and still runs
// commands, and a Create of the other's session key never returns the
// other's sandbox.
func (s *suite) testInstallationsApart(t *testing.T) {
	instA, instB := newInstallation(t), newInstallation(t)
	pA, pB := s.clientOf(t, instA), s.clientOf(t, instB)
	keyA, keyB, keyOrphan := newKey(t), newKey(t), newKey(t)
	sbA, refA := s.create(t, pA, keyA)
	sbB, refB := s.create(t, pB, keyB)
	_, refOrphan := s.create(t, pA, keyOrphan)
	writeFile(t, sbA, "owner.txt", []byte("A"))
	writeFile(t, sbB, "owner.txt", []byte("B"))

	if _, err := pB.Attach(t.Context(), keyA, refA); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("Attach of installation A's sandbox by installation B = %v, want ErrNotOwned", err)
	}
	if _, err := pA.Attach(t.Context(), keyB, refB); !errors.Is(err, sandbox.ErrNotOwned) {
		t.Errorf("Attach of installation B's sandbox by installation A = %v, want ErrNotOwned", err)
	}

	checkListedApart(t, pA, pB, instA, instB, refA, refB, refOrphan)
	if dB, ok := pB.(sandbox.Destroyer); ok {
		if err := dB.DestroyRef(t.Context(), refA); !errors.Is(err, sandbox.ErrNotOwned) {
			t.Errorf("DestroyRef of installation A's sandbox by installation B = %v, want ErrNotOwned", err)
		}
		if err := pA.(sandbox.Destroyer).DestroyRef(t.Context(), refB); !errors.Is(err, sandbox.ErrNotOwned) {
			t.Errorf("DestroyRef of installation B's sandbox by installation A = %v, want ErrNotOwned", err)
		}
	}

	if canReconcile(pA) {
		s.checkReconciledApart(t, pA, pB, instA, instB, keyA, keyB, keyOrphan, refA, refB, refOrphan)
	}

	for _, c := range []struct {
		name string
		p    sandbox.Provider
		key  string
		ref  sandbox.Ref
	}{{"A", s.clientOf(t, instA), keyA, refA}, {"B", s.clientOf(t, instB), keyB, refB}} {
		sb, err := c.p.Attach(t.Context(), c.key, c.ref)
		if err != nil {
			t.Errorf("installation %s: Attach to its own sandbox after the passes = %v, want no error", c.name, err)
			continue
		}
		if got := run(t, sb, "cat owner.txt"); got != c.name {
			t.Errorf("installation %s: cat owner.txt = %q, want %q", c.name, got, c.name)
		}
	}

	sb, ref, err := pB.Create(t.Context(), keyA, s.h.Spec)
	switch {
	case errors.Is(err, sandbox.ErrNotOwned):
	case err != nil:
		t.Errorf("Create by installation B of installation A's session key = %v, want ErrNotOwned or a sandbox of its own", err)
	default:
		s.cleanup(t, pB, ref, sb)
		if ref == refA {
			t.Errorf("Create by installation B of installation A's session key returned A's sandbox %v", refA)
		}
	}
}

// checkListedApart: each installation's List has its own sandboxes,
// labelled with its installation, and none of the other's.
func checkListedApart(t *testing.T, pA, pB sandbox.Provider, instA, instB string, refA, refB, refOrphan sandbox.Ref) {
	t.Helper()
	lA, canList := pA.(sandbox.Lister)
	if !canList {
		return
	}
	lB := pB.(sandbox.Lister)
	listedA, listedB := list(t, lA), list(t, lB)
	for _, want := range []sandbox.Ref{refA, refOrphan} {
		if o, ok := find(listedA, want); !ok || o.Installation != instA {
			t.Errorf("installation A's List() has %v = %+v (listed %v), want it with Installation %q", want, o, ok, instA)
		}
		if _, ok := find(listedB, want); ok {
			t.Errorf("installation B's List() includes installation A's sandbox %v", want)
		}
	}
	if o, ok := find(listedB, refB); !ok || o.Installation != instB {
		t.Errorf("installation B's List() has %v = %+v (listed %v), want it with Installation %q", refB, o, ok, instB)
	}
	if _, ok := find(listedA, refB); ok {
		t.Errorf("installation A's List() includes installation B's sandbox %v", refB)
	}
}

// checkReconciledApart: reconciliation passes of both installations
// destroy only installation A's orphan, in the first pass, and never a
// bound sandbox; the orphan is gone after them.
func (s *suite) checkReconciledApart(t *testing.T, pA, pB sandbox.Provider, instA, instB, keyA, keyB, keyOrphan string, refA, refB, refOrphan sandbox.Ref) {
	t.Helper()
	rA := reconciler(pA, NewBindings(bound(pA, keyA, refA)), instA)
	rB := reconciler(pB, NewBindings(bound(pB, keyB, refB)), instB)
	for pass := range reconcilePasses {
		resA, resB := reconcileBoth(t, pass, rA, rB)
		if want := pass == 0; slices.Contains(resA.Destroyed, refOrphan) != want {
			t.Errorf("installation A, pass %d: destroyed %v; destroying its orphan %v: %v, want %v", pass, resA.Destroyed, refOrphan, !want, want)
		}
		for _, ref := range []sandbox.Ref{refA, refB} {
			if slices.Contains(resA.Destroyed, ref) || slices.Contains(resB.Destroyed, ref) {
				t.Errorf("pass %d destroyed the bound sandbox %v (A destroyed %v, B destroyed %v)", pass, ref, resA.Destroyed, resB.Destroyed)
			}
		}
		if slices.Contains(resB.Destroyed, refOrphan) {
			t.Errorf("installation B, pass %d, destroyed installation A's orphan %v", pass, refOrphan)
		}
	}
	if _, err := s.clientOf(t, instA).Attach(t.Context(), keyOrphan, refOrphan); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Attach to installation A's reconciled orphan = %v, want it gone (ErrNotFound)", err)
	}
}

// testInstallationsLegacy: resources made before installation ids (no
// installation label) are listed by every installation as legacy, adopted
// by the one whose binding or intent references them (kept, bound,
// attached), and left alone and reported by every reconciler otherwise:
// never destroyed.
func (s *suite) testInstallationsLegacy(t *testing.T) {
	if s.h.Unlabel == nil {
		t.Skip("Harness.Unlabel is not set: the provider's own tests cover legacy resources")
	}
	instA, instB := newInstallation(t), newInstallation(t)
	pA, pB := s.clientOf(t, instA), s.clientOf(t, instB)
	if !canReconcile(pA) {
		t.Skipf("provider %q cannot list and destroy its sandboxes", pA.Name())
	}
	keyBound, keyIntent, keyLoose := newKey(t), newKey(t), newKey(t)
	refs := map[string]sandbox.Ref{}
	for _, key := range []string{keyBound, keyIntent, keyLoose} {
		_, ref := s.create(t, pA, key)
		s.h.Unlabel(t, ref)
		refs[key] = ref
	}
	for name, p := range map[string]sandbox.Provider{"A": pA, "B": pB} {
		listed := list(t, p.(sandbox.Lister))
		for _, ref := range refs {
			if o, ok := find(listed, ref); !ok || o.Installation != "" {
				t.Errorf("installation %s's List() has the legacy %v = %+v (listed %v), want it with no installation", name, ref, o, ok)
			}
		}
	}

	bA := NewBindings(bound(pA, keyBound, refs[keyBound]), sandbox.Binding{SessionID: keyIntent, Provider: pA.Name()})
	rA := reconciler(pA, bA, instA)
	rB := reconciler(pB, NewBindings(), instB)
	for pass := range reconcilePasses {
		resA, resB := reconcileBoth(t, pass, rA, rB)
		for _, ref := range refs {
			if slices.Contains(resA.Destroyed, ref) || slices.Contains(resB.Destroyed, ref) {
				t.Errorf("pass %d destroyed the legacy sandbox %v (A destroyed %v, B destroyed %v)", pass, ref, resA.Destroyed, resB.Destroyed)
			}
			if !slices.Contains(resB.Unclaimed, ref) {
				t.Errorf("installation B, pass %d: unclaimed %v, want it to report the legacy %v", pass, resB.Unclaimed, ref)
			}
		}
		if got, want := slices.Contains(resA.Bound, refs[keyIntent]), pass == 0; got != want {
			t.Errorf("installation A, pass %d: bound %v; adopting %v for its intent: %v, want %v", pass, resA.Bound, refs[keyIntent], got, want)
		}
		if !slices.Contains(resA.Unclaimed, refs[keyLoose]) || slices.Contains(resA.Unclaimed, refs[keyBound]) || slices.Contains(resA.Unclaimed, refs[keyIntent]) {
			t.Errorf("installation A, pass %d: unclaimed %v, want the unreferenced %v only, not its bound ones", pass, resA.Unclaimed, refs[keyLoose])
		}
	}
	if b := bA.Binding(keyIntent); b.ExternalID != refs[keyIntent].ID {
		t.Errorf("installation A's intent after the passes = %+v, want it bound to the legacy %v", b, refs[keyIntent])
	}
	for _, key := range []string{keyBound, keyIntent, keyLoose} {
		sb, err := s.clientOf(t, instA).Attach(t.Context(), key, refs[key])
		if err != nil {
			t.Errorf("Attach by installation A to the legacy %v after the passes = %v, want no error", refs[key], err)
			continue
		}
		if got := run(t, sb, "echo alive"); got != "alive\n" {
			t.Errorf("echo alive in the legacy %v = %q", refs[key], got)
		}
	}
}

// reconcileBoth runs one pass of installation A's reconciler, then of
// B's, and returns what each did.
func reconcileBoth(t *testing.T, pass int, rA, rB *sandbox.Reconciler) (resA, resB sandbox.ReconcileResult) {
	t.Helper()
	resA, err := rA.RunOnce(t.Context())
	if err != nil {
		t.Fatalf("installation A, pass %d: %v", pass, err)
	}
	resB, err = rB.RunOnce(t.Context())
	if err != nil {
		t.Fatalf("installation B, pass %d: %v", pass, err)
	}
	return resA, resB
}
