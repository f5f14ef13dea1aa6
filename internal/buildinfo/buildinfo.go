// Package buildinfo holds the version and commit a Mango binary was built
// from. Release builds stamp them with the linker:
//
//	go build -ldflags "-X github.com/mangohq/mango/internal/buildinfo.version=v1.2.3 \
//	    -X github.com/mangohq/mango/internal/buildinfo.commit=0123abc"
//
// (scripts/build-images.sh and `make build` do this). Unstamped builds fall
// back to the VCS revision Go records in the binary, then to "dev" and
// "unknown". It lives in the shared internal module because both services
// are stamped the same way, and the worker reports its version to the
// api-server in its heartbeat.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Set by the linker (-X); read through Get.
var (
	version string
	commit  string
)

// Info describes one build.
type Info struct {
	// Version is the release version ("v1.2.3") or "dev".
	Version string `json:"version"`
	// Commit is the source revision, or "unknown".
	Commit string `json:"commit"`
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string `json:"go_version"`
}

var get = sync.OnceValue(func() Info {
	info := Info{Version: version, Commit: commit, GoVersion: runtime.Version()}
	if info.Commit == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					info.Commit = s.Value
				}
			}
		}
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
})

// Get returns this binary's build information.
func Get() Info { return get() }
