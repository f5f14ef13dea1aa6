package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// ErrUnknownProvider is returned (wrapped, with the requested name and the
// known names) by [Registry.Lookup] when no provider is registered under the
// requested name.
var ErrUnknownProvider = errors.New("unknown sandbox provider")

// FromEnv returns a [Factory] Configure function for a provider whose
// configuration configFromEnv reads; its Build stores the installation id
// in that configuration with setInstallation and calls newProvider, which
// must not contact the backend.
func FromEnv[C any, P Provider](configFromEnv func(getenv func(string) string) (C, error), newProvider func(C) (P, error),
	setInstallation func(cfg *C, installation string),
) func(getenv func(string) string) (Build, error) {
	return func(getenv func(string) string) (Build, error) {
		cfg, err := configFromEnv(getenv)
		if err != nil {
			return nil, err
		}
		return func(_ context.Context, installation string) (Provider, error) {
			cfg := cfg
			setInstallation(&cfg, installation)
			p, err := newProvider(cfg)
			if err != nil {
				return nil, err
			}
			return p, nil
		}, nil
	}
}

// Registry maps provider names to factories. The zero value is an empty
// registry ready to use; a Registry is safe for concurrent use.
type Registry struct {
	mu        sync.RWMutex
	factories map[string]Factory
}

// Register makes a provider available under name. It panics if name is not a
// lowercase identifier ([a-z0-9] and '-', starting with a letter), if
// f.Configure is nil, or if name is already registered: all three are programming errors in
// the worker's wiring, not configuration errors.
func (r *Registry) Register(name string, f Factory) {
	if !validName(name) {
		panic(fmt.Sprintf("sandbox: invalid provider name %q", name))
	}
	if f.Configure == nil {
		panic(fmt.Sprintf("sandbox: provider %q registered with a nil factory", name))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.factories[name]; dup {
		panic(fmt.Sprintf("sandbox: provider %q registered twice", name))
	}
	if r.factories == nil {
		r.factories = make(map[string]Factory)
	}
	r.factories[name] = f
}

// Lookup returns the factory registered under name. Names are matched
// exactly; callers normalise user input to lowercase first. If nothing is
// registered under name, the error wraps [ErrUnknownProvider] and lists the
// known names, e.g. `unknown sandbox provider "nonsense" (known: docker, local)`.
func (r *Registry) Lookup(name string) (Factory, error) {
	r.mu.RLock()
	f, ok := r.factories[name]
	r.mu.RUnlock()
	if !ok {
		known := r.Names()
		if len(known) == 0 {
			return Factory{}, fmt.Errorf("%w %q (none registered)", ErrUnknownProvider, name)
		}
		return Factory{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownProvider, name, strings.Join(known, ", "))
	}
	return f, nil
}

// Names returns the registered provider names in sorted order.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.factories))
}

func validName(name string) bool {
	if name == "" || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for _, c := range name {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}
