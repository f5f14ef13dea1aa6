package app

import (
	"context"
	"slices"
	"testing"

	"github.com/mangohq/mango/execution-worker/internal/config"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
	"github.com/mangohq/mango/proto/sessionwf"
)

func TestTaskQueues(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	local, err := sandboxlocal.New(sandboxlocal.Config{Root: root, Installation: "test-installation"})
	if err != nil {
		t.Fatal(err)
	}
	loc, err := local.Locality(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	other, err := sandboxlocal.New(sandboxlocal.Config{Root: t.TempDir(), Installation: "test-installation"})
	if err != nil {
		t.Fatal(err)
	}
	if otherLoc, _ := other.Locality(context.Background()); otherLoc == loc {
		t.Errorf("two sandbox roots on one host share the locality %s", loc)
	}
	tests := []struct {
		name        string
		env         map[string]string
		wantQueues  []string
		wantBinding string
	}{
		{"defaults: the provider and the locality, never the process",
			map[string]string{}, []string{"mango.local", "mango.local." + loc}, "mango.local." + loc},
		{"an explicit locality",
			map[string]string{"MANGO_SANDBOX_LOCALITY": "rack-7"}, []string{"mango.local", "mango.local.rack-7"}, "mango.local.rack-7"},
		{"a pinned worker id also polls the queue older bindings name",
			map[string]string{"MANGO_WORKER_ID": "w1"}, []string{"mango.local", "mango.local." + loc, "mango.local.w1"}, "mango.local." + loc},
		{"a remote provider polls its shared queue only",
			map[string]string{"MANGO_SANDBOX": "e2b", "MANGO_WORKER_ID": "w1"}, []string{"mango.e2b"}, "mango.e2b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"MANGO_WORKER_TOKEN": "tok", "MANGO_LOCAL_SANDBOX_ROOT": root}
			for k, v := range tt.env {
				env[k] = v
			}
			cfg, err := config.FromEnv(func(k string) string { return env[k] }, Providers())
			if err != nil {
				t.Fatal(err)
			}
			queues, binding, err := taskQueues(context.Background(), cfg, local, sessionwf.Queues{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(queues, tt.wantQueues) || binding != tt.wantBinding {
				t.Errorf("taskQueues = %v, binding %s; want %v, binding %s", queues, binding, tt.wantQueues, tt.wantBinding)
			}
		})
	}
}
