package buildinfo

import (
	"runtime"
	"testing"
)

func TestGetFallsBackWhenUnstamped(t *testing.T) {
	info := Get()
	if version == "" && info.Version != "dev" {
		t.Errorf("Version = %q, want dev for an unstamped build", info.Version)
	}
	if info.Commit == "" {
		t.Error("Commit is empty, want a revision or \"unknown\"")
	}
	if info.GoVersion != runtime.Version() {
		t.Errorf("GoVersion = %q, want %q", info.GoVersion, runtime.Version())
	}
}
