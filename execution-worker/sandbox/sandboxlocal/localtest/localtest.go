// Package localtest helps tests of the local provider's ownership rules.
package localtest

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// StripInstallation rewrites the ownership marker of the local workspace
// ref without its installation, as versions before installation ids wrote
// it. A marker without an installation fails the test.
func StripInstallation(t *testing.T, ref sandbox.Ref) {
	t.Helper()
	data, err := os.ReadFile(ref.ID + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["installation"]; !ok {
		t.Fatalf("marker of %s has no installation field: %s", ref.ID, data)
	}
	delete(m, "installation")
	if data, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ref.ID+".json", data, 0o600); err != nil {
		t.Fatal(err)
	}
}
