package deptest_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/mangohq/mango/internal/deptest"
	"github.com/mangohq/mango/internal/testbin"
	"github.com/mangohq/mango/internal/testenv"
)

// TestImportGraph checks the real graph of every workspace module, tests
// included, against deptest.Rules.
func TestImportGraph(t *testing.T) {
	t.Parallel()
	root, err := testbin.RepoRoot()
	if err != nil {
		testenv.Unavailable(t, "the import graph needs the workspace: %v", err)
	}
	if _, err := exec.LookPath("go"); err != nil {
		testenv.Unavailable(t, "the import graph needs the go command: %v", err)
	}
	g, err := deptest.Load(t.Context(), root, deptest.Modules(deptest.Rules))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range deptest.Modules(deptest.Rules) {
		n := 0
		for p := range g {
			if deptest.InModule(p, m) {
				n++
			}
		}
		if n == 0 {
			t.Errorf("go list returned no package of module %s, want its packages and their dependencies", m)
		}
	}
	if len(g) < 100 {
		t.Fatalf("go list returned %d packages, want the whole workspace's dependency graph", len(g))
	}
	for _, v := range deptest.Violations(g, deptest.Rules) {
		t.Error(v)
	}
}

// TestRulesCoverWorkspace checks that every module of go.work has a rule, so
// a new module cannot escape the check.
func TestRulesCoverWorkspace(t *testing.T) {
	t.Parallel()
	root, err := testbin.RepoRoot()
	if err != nil {
		testenv.Unavailable(t, "needs the workspace: %v", err)
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Path}}").Output()
	if err != nil {
		t.Fatalf("go list -m in %s: %v", root, err)
	}
	mods := deptest.Modules(deptest.Rules)
	for _, m := range strings.Fields(string(out)) {
		if !slices.Contains(mods, strings.TrimPrefix(m, deptest.Root)) {
			t.Errorf("workspace module %s has no rule in deptest.Rules, want one", m)
		}
	}
}

// TestViolations proves the checker can fail: graphs with a known-bad edge,
// direct or through another package, test variants included, must be
// reported, and good graphs must not.
func TestViolations(t *testing.T) {
	t.Parallel()
	const (
		api      = deptest.Root + "api-server/internal/httpapi"
		apiMain  = deptest.Root + "api-server/cmd/api-server"
		worker   = deptest.Root + "execution-worker/agentruntime"
		wMain    = deptest.Root + "execution-worker/cmd/execution-worker"
		db       = deptest.Root + "db"
		dbtest   = deptest.Root + "db/dbtest"
		shared   = deptest.Root + "internal/tlsconf"
		testenv  = deptest.Root + "internal/testenv"
		contract = deptest.Root + "proto/sessionwf"
		bench    = deptest.Root + "scripts/bench"
	)
	good := deptest.Graph{
		apiMain: {api, db, shared, contract}, api: {db, "net/http"}, db: {"github.com/jackc/pgx/v5"},
		dbtest: {db, testenv}, wMain: {worker, shared, contract}, worker: {contract, "context"},
		shared: {"crypto/tls"}, testenv: {"testing"}, contract: {"google.golang.org/protobuf/proto"},
		bench: {db, worker},
	}
	with := func(from string, to ...string) deptest.Graph {
		g := deptest.Graph{}
		for k, v := range good {
			g[k] = slices.Clone(v)
		}
		g[from] = append(g[from], to...)
		for _, p := range to {
			if _, ok := g[p]; !ok {
				g[p] = nil
			}
		}
		return g
	}
	tests := []struct {
		name string
		g    deptest.Graph
		want []string // substrings, one per expected violation
	}{
		{name: "the rules hold", g: good},
		{name: "api-server imports worker code", g: with(api, worker),
			want: []string{"api-server must not depend on " + worker}},
		{name: "worker imports db", g: with(worker, db),
			want: []string{"execution-worker must not depend on " + db}},
		{name: "worker reaches db through a shared package", g: with(shared, dbtest),
			want: []string{
				"execution-worker must not depend on " + dbtest,
				"internal must not depend on " + dbtest,
			}},
		{name: "worker imports the api-server", g: with(wMain, apiMain),
			want: []string{"execution-worker must not depend on " + apiMain}},
		{name: "internal imports a service", g: with(testenv, worker),
			want: []string{"internal must not depend on " + worker, "db must not depend on " + worker}},
		{name: "proto imports internal", g: with(contract, shared),
			want: []string{"proto must not depend on " + shared + " (proto is the contract"}},
		{name: "db imports the api-server", g: with(db, api),
			want: []string{"db must not depend on " + api}},
		{name: "a rule's module is missing", g: deptest.Graph{apiMain: {db}},
			want: []string{"execution-worker: no package", "internal: no package", "proto: no package", "scripts/bench: no package", "db: no package"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := deptest.Violations(tt.g, deptest.Rules)
			for _, w := range tt.want {
				if !slices.ContainsFunc(got, func(v string) bool { return strings.Contains(v, w) }) {
					t.Errorf("Violations = %q, want one containing %q", got, w)
				}
			}
			if len(tt.want) == 0 && len(got) != 0 {
				t.Errorf("Violations = %q, want none", got)
			}
		})
	}
}

// TestViolationChain checks that a violation names the shortest import
// chain from the module that reaches the forbidden package, so the fix is
// obvious, through go list's test variants.
func TestViolationChain(t *testing.T) {
	t.Parallel()
	r := deptest.Root
	out := r + "execution-worker/cmd/execution-worker " + r + "execution-worker/tools\n" +
		r + "execution-worker/tools [" + r + "execution-worker/tools.test] " + r + "internal/helper [" + r + "execution-worker/tools.test] fmt\n" +
		r + "internal/helper [" + r + "execution-worker/tools.test] " + r + "db/dbtest\n" +
		r + "db/dbtest testing\n"
	g, err := deptest.Parse([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	variant := r + "execution-worker/tools [" + r + "execution-worker/tools.test]"
	if got, want := g[variant], []string{r + "internal/helper [" + r + "execution-worker/tools.test]", "fmt"}; !slices.Equal(got, want) {
		t.Errorf("imports of the tools test variant = %q, want %q", got, want)
	}
	got := deptest.Violations(g, []deptest.Rule{{Module: "execution-worker", Forbidden: []string{"db"}, Why: "no db"}})
	want := variant + " -> " + r + "internal/helper [" + r + "execution-worker/tools.test] -> " + r + "db/dbtest"
	if len(got) != 1 || !strings.HasSuffix(got[0], want) {
		t.Fatalf("Violations = %q, want one ending with the chain %q", got, want)
	}
}
