package sandbox_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdocker"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
)

// namedProvider is a Provider that only knows its name; the registry never
// calls anything else.
type namedProvider struct {
	sandbox.Provider
	name string
}

func (p namedProvider) Name() string { return p.name }

func factoryFor(name string, calls *int) sandbox.Factory {
	return sandbox.Factory{Configure: func(func(string) string) (sandbox.Build, error) {
		*calls++
		return func(context.Context, string) (sandbox.Provider, error) { return namedProvider{name: name}, nil }, nil
	}}
}

func TestRegistryLookup(t *testing.T) {
	t.Parallel()
	var reg sandbox.Registry
	var calls int
	reg.Register("local", factoryFor("local", &calls))
	reg.Register("docker", factoryFor("docker", &calls))
	if calls != 0 {
		t.Fatalf("Register called the factory %d times, want 0 (factories are lazy)", calls)
	}

	f, err := reg.Lookup("docker")
	if err != nil {
		t.Fatalf("Lookup(docker) = %v, want no error", err)
	}
	build, err := f.Configure(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	p, err := build(context.Background(), "inst-1")
	if err != nil || p.Name() != "docker" || calls != 1 {
		t.Fatalf("New() = %v, %v after %d calls; want docker provider after 1 call", p, err, calls)
	}

	if got, want := reg.Names(), []string{"docker", "local"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
}

func TestRegistryUnknown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		setup   func(*sandbox.Registry)
		lookup  string
		wantMsg string
	}{
		{
			name: "lists known names sorted",
			setup: func(r *sandbox.Registry) {
				r.Register("local", sandboxlocal.Factory)
				r.Register("docker", sandboxdocker.Factory)
			},
			lookup:  "nonsense",
			wantMsg: `unknown sandbox provider "nonsense" (known: docker, local)`,
		},
		{
			name: "names match exactly",
			setup: func(r *sandbox.Registry) {
				r.Register("local", sandboxlocal.Factory)
			},
			lookup:  "LOCAL",
			wantMsg: `unknown sandbox provider "LOCAL" (known: local)`,
		},
		{
			name:    "empty registry",
			setup:   func(*sandbox.Registry) {},
			lookup:  "local",
			wantMsg: `unknown sandbox provider "local" (none registered)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var reg sandbox.Registry
			tt.setup(&reg)
			_, err := reg.Lookup(tt.lookup)
			if !errors.Is(err, sandbox.ErrUnknownProvider) {
				t.Fatalf("Lookup(%q) = %v, want ErrUnknownProvider", tt.lookup, err)
			}
			if err.Error() != tt.wantMsg {
				t.Errorf("Lookup(%q) error = %q, want %q", tt.lookup, err, tt.wantMsg)
			}
		})
	}
}

func TestRegisterPanics(t *testing.T) {
	t.Parallel()
	valid := sandboxlocal.Factory
	tests := []struct {
		name      string
		register  func(*sandbox.Registry)
		wantPanic string
	}{
		{"uppercase name", func(r *sandbox.Registry) { r.Register("Local", valid) }, "invalid provider name"},
		{"empty name", func(r *sandbox.Registry) { r.Register("", valid) }, "invalid provider name"},
		{"dot in name", func(r *sandbox.Registry) { r.Register("a.b", valid) }, "invalid provider name"},
		{"nil factory", func(r *sandbox.Registry) { r.Register("x", sandbox.Factory{}) }, "nil factory"},
		{"duplicate", func(r *sandbox.Registry) {
			r.Register("local", valid)
			r.Register("local", valid)
		}, "registered twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				r := recover()
				msg, _ := r.(string)
				if !strings.Contains(msg, tt.wantPanic) {
					t.Errorf("panic = %v, want a panic containing %q", r, tt.wantPanic)
				}
			}()
			var reg sandbox.Registry
			tt.register(&reg)
		})
	}
}

// TestBuiltinProviders checks the skeleton providers' names and the traits
// the unsafe-local guard and host queue routing depend on.
func TestBuiltinProviders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		factory    sandbox.Factory
		runsOnHost bool
		hostBound  bool
	}{
		{sandboxlocal.Name, sandboxlocal.Factory, true, true},
		{sandboxdocker.Name, sandboxdocker.Factory, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			build, err := tt.factory.Configure(os.Getenv)
			if err != nil {
				t.Fatalf("Configure() = %v", err)
			}
			p, err := build(context.Background(), "inst-1")
			if err != nil {
				t.Fatalf("New() = %v", err)
			}
			if p.Name() != tt.name {
				t.Errorf("Name() = %q, want %q", p.Name(), tt.name)
			}
			if got := tt.factory.Traits; got.RunsOnHost != tt.runsOnHost || got.HostBound != tt.hostBound {
				t.Errorf("Traits = %+v, want RunsOnHost=%v HostBound=%v", got, tt.runsOnHost, tt.hostBound)
			}
		})
	}
}

func TestFromEnv(t *testing.T) {
	t.Parallel()
	configFromEnv := func(getenv func(string) string) (string, error) {
		if v := getenv("NAME"); v != "" {
			return v, nil
		}
		return "", errors.New("NAME is required")
	}
	refuse := errors.New("refused")
	newProvider := func(name string) (*namedProvider, error) {
		if name == "bad@" {
			return nil, refuse
		}
		return &namedProvider{name: name}, nil
	}
	// The installation reaches the configuration before the provider is
	// built: here it is appended to the name.
	configure := sandbox.FromEnv(configFromEnv, newProvider, func(name *string, installation string) { *name += "@" + installation })
	env := map[string]string{"NAME": "fake"}
	build, err := configure(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	p, err := build(t.Context(), "inst-1")
	if err != nil || p.Name() != "fake@inst-1" {
		t.Fatalf("New with NAME=fake = %v, %v; want the provider named fake@inst-1", p, err)
	}
	if p, err := build(t.Context(), "inst-2"); err != nil || p.Name() != "fake@inst-2" {
		t.Errorf("a second Build = %v, %v; want the provider named fake@inst-2 (each build from the configuration read once)", p, err)
	}
	if b, err := configure(func(string) string { return "" }); b != nil || err == nil || err.Error() != "NAME is required" {
		t.Errorf("Configure without NAME = %v, %v; want no builder and the configuration's error", b, err)
	}
	env["NAME"] = "bad"
	build, err = configure(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if p, err := build(t.Context(), ""); p != nil || !errors.Is(err, refuse) {
		t.Errorf("New refused by newProvider = %v, %v; want a nil Provider and its error", p, err)
	}
}

func TestValidateInstallation(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"0d6c5a3e-6f1b-4f5e-9d7a-2b1c3d4e5f60", "a", "inst-1", strings.Repeat("a", 63)} {
		if err := sandbox.ValidateInstallation(id); err != nil {
			t.Errorf("ValidateInstallation(%q) = %v, want no error", id, err)
		}
	}
	for _, id := range []string{"", "-a", "a-", "Inst", "a_b", "a.b", "a b", strings.Repeat("a", 64)} {
		if err := sandbox.ValidateInstallation(id); err == nil {
			t.Errorf("ValidateInstallation(%q) = nil, want an error", id)
		}
	}
	if !sandbox.OwnedBy("inst-1", "inst-1") || !sandbox.OwnedBy("", "inst-1") || sandbox.OwnedBy("inst-2", "inst-1") {
		t.Error("OwnedBy: want its own and unlabelled resources only")
	}
}
