// Package dockertest helps tests and tools that need the Docker daemon: it
// connects (skipping a test when no daemon is reachable, unless
// MANGO_REQUIRE_SERVICES=1), builds the Mango sandbox image without any
// registry, and removes what a test created.
//
// The sandbox image is FROM scratch plus a statically linked busybox (Debian
// package busybox-static, /bin/busybox by default; MANGO_BUSYBOX overrides
// the path) with a symbolic link per applet in /bin, so it has /bin/sh,
// find, grep, setsid, kill and the rest of the POSIX tools the built-in
// tools and the provider need. scripts/build-sandbox-image.sh builds the
// same layout with the docker CLI.
package dockertest

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"

	"github.com/mangohq/mango/internal/testenv"
)

// Image is the tag of the sandbox image (the provider's default image).
const Image = "mango-sandbox:latest"

// EnvBusybox overrides the path of the static busybox binary.
const EnvBusybox = "MANGO_BUSYBOX"

// TestLabel is put (with a per-process random value) on every container a
// test creates through [Labels], so [Cleanup] removes exactly those.
const TestLabel = "mango.test"

// Path is the PATH of the sandbox image.
const Path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

var runID = sync.OnceValue(func() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
})

// Labels returns the labels that mark containers created by this test
// process.
func Labels() map[string]string {
	return map[string]string{TestLabel: runID()}
}

// CaseLabel is put, with the test's name, on the containers of one test,
// so that test (and the reconciler of its providers) touches only its own
// containers while other tests of the process run in parallel.
const CaseLabel = "mango.test.case"

// CaseLabels returns Labels plus tb's CaseLabel.
func CaseLabels(tb testing.TB) map[string]string {
	l := Labels()
	l[CaseLabel] = strings.ReplaceAll(tb.Name(), "/", "_")
	return l
}

// CleanupCase removes the containers of tb (CaseLabels) only; the
// process-wide sweep ([Cleanup]) belongs in TestMain, after every test.
func CleanupCase(ctx context.Context, cli *client.Client, tb testing.TB) error {
	return remove(ctx, cli, client.Filters{}.Add("label", TestLabel+"="+runID()).
		Add("label", CaseLabel+"="+CaseLabels(tb)[CaseLabel]))
}

// Client returns a client of the daemon named by the DOCKER_* environment,
// with the API version negotiated. When the daemon is unreachable it skips
// tb, or fails it when MANGO_REQUIRE_SERVICES=1.
func Client(tb testing.TB) *client.Client {
	tb.Helper()
	cli, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
		cancel()
		if err != nil {
			_ = cli.Close()
		}
	}
	if err != nil {
		testenv.Unavailable(tb, "docker daemon unreachable: %v", err)
	}
	tb.Cleanup(func() { _ = cli.Close() })
	return cli
}

var buildMu sync.Mutex

// EnsureImage builds the sandbox image under tag unless it already exists
// (or force is set).
func EnsureImage(ctx context.Context, cli *client.Client, tag string, force bool) error {
	buildMu.Lock()
	defer buildMu.Unlock()
	if !force {
		_, err := cli.ImageInspect(ctx, tag)
		if err == nil {
			return nil
		}
		if !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("inspect image %s: %w", tag, err)
		}
	}
	buildCtx, err := BuildContext()
	if err != nil {
		return err
	}
	res, err := cli.ImageBuild(ctx, bytes.NewReader(buildCtx), client.ImageBuildOptions{
		Tags:        []string{tag},
		Dockerfile:  "Dockerfile",
		Remove:      true,
		ForceRemove: true,
		NetworkMode: "none",
		Labels:      map[string]string{"mango.sandbox-image": "busybox"},
	})
	if err != nil {
		return fmt.Errorf("build image %s: %w", tag, err)
	}
	defer func() { _ = res.Body.Close() }()
	dec := json.NewDecoder(res.Body)
	var last string
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("build image %s: read progress: %w", tag, err)
		}
		if m.Error != nil {
			return fmt.Errorf("build image %s: %s", tag, m.Error.Message)
		}
		if s := strings.TrimSpace(m.Stream); s != "" {
			last = s
		}
	}
	if _, err := cli.ImageInspect(ctx, tag); err != nil {
		return fmt.Errorf("build image %s: not found after build (last output %q): %w", tag, last, err)
	}
	return nil
}

// Dockerfile is the build recipe of the sandbox image; the context holds
// the root file system under rootfs/.
const Dockerfile = `FROM scratch
COPY rootfs/ /
ENV PATH=` + Path + `
WORKDIR /workspace
CMD ["sleep", "infinity"]
`

// BuildContext returns the tar build context of the sandbox image.
func BuildContext() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(Dockerfile)), ModTime: now}); err != nil {
		return nil, err
	}
	if _, err := tw.Write([]byte(Dockerfile)); err != nil {
		return nil, err
	}
	if err := writeRootFS(tw, "rootfs/"); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// RootFSLayer returns the root file system of the sandbox image as an
// uncompressed layer tar (for registries: see the pull tests).
func RootFSLayer() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := writeRootFS(tw, ""); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// BusyboxPath returns the static busybox to put in the image, checking that
// it is statically linked.
func BusyboxPath() (string, error) {
	p := cmp.Or(os.Getenv(EnvBusybox), "/bin/busybox")
	f, err := elf.Open(p)
	if err != nil {
		return "", fmt.Errorf("static busybox %s (install Debian's busybox-static or set %s): %w", p, EnvBusybox, err)
	}
	defer func() { _ = f.Close() }()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return "", fmt.Errorf("busybox %s is dynamically linked; install Debian's busybox-static or set %s", p, EnvBusybox)
		}
	}
	return p, nil
}

func writeRootFS(tw *tar.Writer, prefix string) error {
	bb, err := BusyboxPath()
	if err != nil {
		return err
	}
	bin, err := os.ReadFile(bb)
	if err != nil {
		return fmt.Errorf("read busybox: %w", err)
	}
	out, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return fmt.Errorf("%s --list: %w", bb, err)
	}
	applets := strings.Fields(string(out))
	slices.Sort(applets)

	now := time.Now()
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: prefix + name + "/", Mode: mode, ModTime: now})
	}
	link := func(name, target string) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: prefix + name, Linkname: target, Mode: 0o777, ModTime: now})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: prefix + name, Mode: mode, Size: int64(len(data)), ModTime: now}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	steps := []func() error{
		func() error { return dir("bin", 0o755) },
		func() error { return file("bin/busybox", 0o755, bin) },
		func() error { return dir("etc", 0o755) },
		func() error {
			return file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"))
		},
		func() error { return file("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n")) },
		func() error { return dir("root", 0o700) },
		func() error { return dir("tmp", 0o1777) },
		func() error { return dir("workspace", 0o755) },
		func() error { return link("sbin", "bin") },
		func() error { return dir("usr", 0o755) },
		func() error { return link("usr/bin", "../bin") },
		func() error { return link("usr/sbin", "../bin") },
	}
	for _, a := range applets {
		if a == "busybox" || strings.ContainsAny(a, "/[") {
			continue // "[" and "[[" are shell builtins; keep names plain
		}
		steps = append(steps, func() error { return link("bin/"+a, "busybox") })
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("write sandbox root file system: %w", err)
		}
	}
	return nil
}

// Cleanup removes every container carrying this process's test label. It is
// meant for TestMain, so it runs after every test, even failed ones; a test
// cleans up after itself with [CleanupCase].
func Cleanup(ctx context.Context, cli *client.Client) error {
	return remove(ctx, cli, client.Filters{}.Add("label", TestLabel+"="+runID()))
}

func remove(ctx context.Context, cli *client.Client, filters client.Filters) error {
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filters})
	if err != nil {
		return fmt.Errorf("list test containers: %w", err)
	}
	var errs []error
	for _, c := range res.Items {
		// A daemon under load may answer that the kill got no exit event
		// yet: that passes, so the removal is tried again (5 tries).
		_, err := backoff.Retry(ctx, func() (struct{}, error) {
			_, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
			// Not found, or being removed by someone else (a test's own
			// teardown racing this sweep): either way it is going away.
			if err == nil || cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) || strings.Contains(err.Error(), "already in progress") {
				return struct{}{}, nil
			}
			if !strings.Contains(err.Error(), "did not receive an exit event") {
				return struct{}{}, backoff.Permanent(err)
			}
			return struct{}{}, err
		}, backoff.WithBackOff(backoff.NewConstantBackOff(500*time.Millisecond)), backoff.WithMaxTries(5))
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
