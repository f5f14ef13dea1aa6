// Package deptest checks Mango's import graph: which of its modules may
// depend on which (in the manner of tailscale's tstest/deptest). The rules
// are the service split of DESIGN.md: the api-server never imports worker
// code; the execution worker holds no database credentials and imports
// neither db nor the api-server; db is imported by the api-server only;
// the internal and proto modules, shared by both services, import neither
// service nor db (and proto, the contract, nothing else of Mango's).
//
// [Load] reads the graph of every workspace module, tests included, with
// `go list -deps -test`; [Violations] applies [Rules] to it and is a pure
// function, so its own tests can prove that a forbidden edge is caught.
package deptest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
)

// Root is the import path prefix of every Mango module.
const Root = "github.com/mangohq/mango/"

// Rule forbids the packages of one module to depend, directly or through
// other packages, on any package of the Forbidden modules.
type Rule struct {
	// Module is the module's path below Root ("execution-worker").
	Module string
	// Forbidden are the modules it must not reach, below Root.
	Forbidden []string
	// Why is the reason, printed with a violation.
	Why string
}

// Rules are the import rules of every Mango module in go.work.
var Rules = []Rule{
	{Module: "api-server", Forbidden: []string{"execution-worker", "scripts/bench"},
		Why: "the api-server never imports worker code: it starts workflows through Temporal and serves workers over the ControlPlane"},
	{Module: "execution-worker", Forbidden: []string{"db", "api-server", "scripts/bench"},
		Why: "the worker holds no database credentials and shares no code with the api-server, only the proto contract"},
	{Module: "db", Forbidden: []string{"api-server", "execution-worker", "scripts/bench"},
		Why: "db is a library of the api-server only"},
	{Module: "internal", Forbidden: []string{"api-server", "execution-worker", "db", "scripts/bench"},
		Why: "internal is shared by both services, so it may import neither of them nor db"},
	{Module: "proto", Forbidden: []string{"api-server", "execution-worker", "db", "internal", "scripts/bench"},
		Why: "proto is the contract: it depends on no Mango code"},
	{Module: "scripts/bench", Forbidden: []string{"api-server"},
		Why: "the benchmark drives the api-server through its public API only"},
}

// Modules are the modules Rules cover: every module of go.work.
func Modules(rules []Rule) []string {
	var mods []string
	for _, r := range rules {
		mods = append(mods, r.Module)
	}
	return mods
}

// Graph maps an import path to the import paths it imports directly.
type Graph map[string][]string

// Load runs `go list -deps -test` in dir (a directory of the workspace) over
// every package of modules and returns their import graph (see Parse).
func Load(ctx context.Context, dir string, modules []string) (Graph, error) {
	args := []string{"list", "-deps", "-test", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}
	for _, m := range modules {
		args = append(args, Root+m+"/...")
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return Parse(out)
}

// Parse reads the graph from `go list -deps -f` output whose lines are a
// package's import path followed by those it imports. A test variant
// ("p [q.test]", p compiled for q's tests) is a node of its own, so the
// imports of p's tests are reached only from its tests.
func Parse(out []byte) (Graph, error) {
	g := Graph{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		fields := fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		pkg := fields[0]
		if _, ok := g[pkg]; !ok {
			g[pkg] = nil
		}
		for _, imp := range fields[1:] {
			if !slices.Contains(g[pkg], imp) {
				g[pkg] = append(g[pkg], imp)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read go list output: %w", err)
	}
	return g, nil
}

// fields splits a go list line into import paths, keeping a test
// variant's suffix with its path ("p [q.test]").
func fields(line string) []string {
	var out []string
	for _, f := range strings.Fields(line) {
		if strings.HasPrefix(f, "[") && len(out) > 0 {
			out[len(out)-1] += " " + f
			continue
		}
		out = append(out, f)
	}
	return out
}

// InModule reports whether the import path pkg, or the package whose test
// variant pkg is, belongs to module (a path below Root).
func InModule(pkg, module string) bool {
	pkg, _, _ = strings.Cut(pkg, " [")
	p := Root + module
	return pkg == p || strings.HasPrefix(pkg, p+"/")
}

// Violations returns one message per package of a forbidden module that a
// rule's module reaches in g, with the import chain that reaches it; none
// when the graph follows the rules. It also reports a rule whose module has
// no package in g, so that a renamed module cannot pass unchecked.
func Violations(g Graph, rules []Rule) []string {
	pkgs := make([]string, 0, len(g))
	for p := range g {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	var out []string
	for _, r := range rules {
		var roots []string
		for _, p := range pkgs {
			if InModule(p, r.Module) {
				roots = append(roots, p)
			}
		}
		if len(roots) == 0 {
			out = append(out, fmt.Sprintf("%s: no package of the module in the graph", r.Module))
			continue
		}
		for _, chain := range forbiddenChains(g, roots, r.Forbidden) {
			out = append(out, fmt.Sprintf("%s must not depend on %s (%s): %s",
				r.Module, chain[len(chain)-1], r.Why, strings.Join(chain, " -> ")))
		}
	}
	return out
}

// forbiddenChains walks g breadth-first from roots and returns, for every
// reachable package of a forbidden module, the shortest import chain to it.
// The walk does not continue through a forbidden package.
func forbiddenChains(g Graph, roots, forbidden []string) [][]string {
	parent := map[string]string{}
	seen := map[string]bool{}
	queue := slices.Clone(roots)
	for _, r := range roots {
		seen[r] = true
	}
	var chains [][]string
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if slices.ContainsFunc(forbidden, func(m string) bool { return InModule(p, m) }) {
			chain := []string{p}
			for q := p; parent[q] != ""; q = parent[q] {
				chain = append([]string{parent[q]}, chain...)
			}
			chains = append(chains, chain)
			continue
		}
		for _, imp := range g[p] {
			if !seen[imp] {
				seen[imp] = true
				parent[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	return chains
}
