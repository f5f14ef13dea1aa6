package sandboxtest

import (
	"context"
	"sync"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// Bindings is an in-memory binding store, one installation's database in
// tests: it implements [sandbox.Bindings] and [sandbox.BindingLister].
// The zero value is empty and ready.
type Bindings struct {
	mu sync.Mutex
	m  map[string]sandbox.Binding
}

// NewBindings returns a store holding bs.
func NewBindings(bs ...sandbox.Binding) *Bindings {
	b := &Bindings{}
	for _, v := range bs {
		b.put(v)
	}
	return b
}

// Binding returns the session's binding or intent (zero when none).
func (b *Bindings) Binding(sessionID string) sandbox.Binding {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.m[sessionID]
}

// GetBinding implements [sandbox.Bindings].
func (b *Bindings) GetBinding(_ context.Context, sessionID string) (*sandbox.Binding, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v, ok := b.m[sessionID]; ok {
		return &v, nil
	}
	return nil, sandbox.ErrNoBinding
}

// PutIntent implements [sandbox.Bindings]: it stores v unless the session
// has a binding or intent, and returns what is stored.
func (b *Bindings) PutIntent(_ context.Context, v sandbox.Binding) (*sandbox.Binding, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.m[v.SessionID]; ok {
		return &old, nil
	}
	b.put(v)
	return &v, nil
}

// PutBinding implements [sandbox.Bindings] and [sandbox.BindingLister].
func (b *Bindings) PutBinding(_ context.Context, v sandbox.Binding) (*sandbox.Binding, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.put(v)
	return &v, nil
}

// DeleteBinding implements [sandbox.Bindings].
func (b *Bindings) DeleteBinding(_ context.Context, sessionID string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, sessionID)
	return nil
}

// ListBindings implements [sandbox.BindingLister].
func (b *Bindings) ListBindings(_ context.Context, provider string) ([]sandbox.Binding, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []sandbox.Binding
	for _, v := range b.m {
		if v.Provider == provider {
			out = append(out, v)
		}
	}
	return out, nil
}

func (b *Bindings) put(v sandbox.Binding) {
	if b.m == nil {
		b.m = map[string]sandbox.Binding{}
	}
	b.m[v.SessionID] = v
}

var (
	_ sandbox.Bindings      = (*Bindings)(nil)
	_ sandbox.BindingLister = (*Bindings)(nil)
)
