package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestModelPrices: MANGO_MODEL_PRICES adds to the default price table; a
// missing or invalid file stops startup with an error naming the variable
// and the faulty entry.
func TestModelPrices(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	load := func(path string) (*Config, error) {
		env := map[string]string{"MANGO_DATABASE_URL": "postgres://u@127.0.0.1:5432/mango", "MANGO_MODEL_PRICES": path}
		return Load(func(k string) string { return env[k] })
	}
	c, err := load("")
	if err != nil || !c.Prices.Priced("claude-sonnet-4-5") || c.Prices.Priced("house-model") {
		t.Fatalf("defaults: %v; want the Claude models priced, nothing else", err)
	}
	c, err = load(write("ok.json", `{"house-model": {"input": 1, "output": 2}}`))
	if err != nil || !c.Prices.Priced("house-model") || !c.Prices.Priced("claude-haiku-4-5") {
		t.Fatalf("a price file: %v; want its model and the defaults priced", err)
	}
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.yaml"), "MANGO_MODEL_PRICES: " + filepath.Join(dir, "missing.yaml") + ": read price file"},
		{write("bad.yaml", "house-model:\n  input: cheap\n  output: 2\n"), `MANGO_MODEL_PRICES: ` + filepath.Join(dir, "bad.yaml") + `: model "house-model": input: must be a non-negative decimal`},
	} {
		if _, err := load(tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("load(%s) = %v, want an error containing %q", tc.path, err, tc.want)
		}
	}
}
