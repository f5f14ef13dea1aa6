package faults

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"

	"github.com/mangohq/mango/internal/freeport"
	"github.com/mangohq/mango/internal/poll"
	"github.com/mangohq/mango/internal/testbin"
)

// proc is one real process of the system under test. It can be killed and
// started again with exactly the same command and environment, as an
// operator's supervisor would.
type proc struct {
	name string
	args []string
	env  []string
	log  string // appended to across restarts

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func newProc(name, logDir string, env []string, args ...string) *proc {
	return &proc{name: name, args: args, env: env, log: filepath.Join(logDir, name+".log")}
}

func (p *proc) start(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fmt.Fprintf(f, "\n==== %s start %s\n", time.Now().Format(time.RFC3339Nano), p.name)
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		t.Fatalf("start %s: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = f.Close(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
}

// pid is the process id of the running process (0 before start).
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// kill sends SIGKILL to the process (not to the commands it started: the
// local sandbox's children outlive it, as they would on a real host) and
// waits for it to be gone.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	p.signal(t, syscall.SIGKILL, 10*time.Second)
}

// signal sends sig and waits up to wait for the process to exit; it
// reports whether it did.
func (p *proc) signal(t *testing.T, sig syscall.Signal, wait time.Duration) bool {
	t.Helper()
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return true
	}
	select {
	case <-done:
		return true
	default:
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return true
	case <-time.After(wait):
		return false
	}
}

// exited reports whether the process has exited, and its exit code.
func (p *proc) exited() (bool, int) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	select {
	case <-done:
		return true, cmd.ProcessState.ExitCode()
	default:
		return false, 0
	}
}

func (p *proc) stop(t *testing.T) {
	t.Helper()
	if !p.signal(t, syscall.SIGTERM, 30*time.Second) {
		p.kill(t)
	}
}

// waitLog waits until the process's log has gained a line containing
// substr since offset (the log's size before the start being waited for).
func (p *proc) waitLog(t *testing.T, offset int64, substr string, timeout time.Duration) {
	t.Helper()
	poll.Until(t, timeout, fmt.Sprintf("%s to log %q", p.name, substr), func() (bool, string) {
		b, _ := os.ReadFile(p.log)
		if int64(len(b)) > offset && bytes.Contains(b[offset:], []byte(substr)) {
			return true, ""
		}
		if ok, code := p.exited(); ok {
			t.Fatalf("%s exited (status %d) before logging %q; log:\n%s", p.name, code, substr, tail(b, 3000))
		}
		return false, "log:\n" + tail(b, 3000)
	})
}

func (p *proc) logSize() int64 {
	fi, err := os.Stat(p.log)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// repoRoot finds the directory holding go.work.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testbin.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// postgres is a PostgreSQL cluster of the suite's own, so stopping it
// (immediate mode, as a crash would) disturbs no other test.
type postgres struct {
	bin, data, log string
	port           int
	asUser         []string // runuser prefix when running as root
}

func pgBinDir(t *testing.T) string {
	t.Helper()
	cands := []string{os.Getenv("MANGO_PG_BINDIR"), "/usr/lib/postgresql/15/bin"}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		cands = append(cands, strings.TrimSpace(string(out)))
	}
	for _, d := range cands {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	t.Fatal("PostgreSQL server binaries (initdb, pg_ctl) not found: set MANGO_PG_BINDIR or run `make tools`")
	return ""
}

func startPostgres(t *testing.T, dir string) *postgres {
	t.Helper()
	pg := &postgres{bin: pgBinDir(t), data: filepath.Join(dir, "pg"), log: filepath.Join(dir, "postgres.log"), port: freeport.Ports(t, 1)}
	if err := os.MkdirAll(pg.data, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root: the cluster belongs to the
		// postgres user (the Debian package creates it).
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root needs the postgres user (apt-get install postgresql-15): %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, p := range []string{dir, pg.data} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
		for d := dir; d != "/"; d = filepath.Dir(d) {
			if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
				_ = os.Chmod(d, fi.Mode().Perm()|0o001)
			}
		}
		pg.asUser = []string{"runuser", "-u", "postgres", "--"}
	}
	pg.run(t, "initdb", "-D", pg.data, "-U", "mango", "--auth-local=trust", "--auth-host=trust", "--encoding=UTF8", "--locale=C", "--no-instructions")
	conf := fmt.Sprintf("\nlisten_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\nmax_connections = 200\n", pg.port, pg.data)
	f, err := os.OpenFile(filepath.Join(pg.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(conf)
	_ = f.Close()
	pg.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.url("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "CREATE DATABASE mango"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.exec("pg_ctl", "-D", pg.data, "-m", "immediate", "-w", "stop") })
	return pg
}

func (pg *postgres) url(db string) string {
	return fmt.Sprintf("postgres://mango@127.0.0.1:%d/%s?sslmode=disable", pg.port, db)
}

func (pg *postgres) exec(tool string, args ...string) error {
	argv := append(append([]string{}, pg.asUser...), append([]string{filepath.Join(pg.bin, tool)}, args...)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", tool, strings.Join(args, " "), err, out)
	}
	return nil
}

func (pg *postgres) run(t *testing.T, tool string, args ...string) {
	t.Helper()
	if err := pg.exec(tool, args...); err != nil {
		t.Fatal(err)
	}
}

func (pg *postgres) start(t *testing.T) {
	t.Helper()
	// The log belongs to the cluster's user; pg_ctl writes it.
	pg.run(t, "pg_ctl", "-D", pg.data, "-l", filepath.Join(pg.data, "server.log"), "-w", "-t", "60", "start")
}

// crash stops the cluster in immediate mode: every backend is killed, and
// the next start runs crash recovery, as after a power cut of the server.
func (pg *postgres) crash(t *testing.T) {
	t.Helper()
	pg.run(t, "pg_ctl", "-D", pg.data, "-m", "immediate", "-w", "stop")
}

// temporalServer starts the Temporal CLI dev server with its file store
// (SQLite, WAL) and the flags of DESIGN.md section 8, so that a SIGKILL
// loses nothing and it can be started again on the same file.
func temporalServer(t *testing.T, root, dir string) (*proc, string) {
	t.Helper()
	bin := os.Getenv("MANGO_TEMPORAL_BIN")
	if bin == "" {
		bin = filepath.Join(root, "bin", "temporal")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("Temporal CLI not found at %s (make tools): %v", bin, err)
	}
	port := freeport.Ports(t, 3)
	p := newProc("temporal", dir, os.Environ(), bin, "server", "start-dev", "--headless", "--ip", "127.0.0.1",
		"--port", strconv.Itoa(port), "--http-port", strconv.Itoa(port+1), "--metrics-port", strconv.Itoa(port+2),
		"--db-filename", filepath.Join(dir, "temporal.db"), "--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal",
		"--log-level", "warn",
		"--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000",
		"--dynamic-config-value", "system.enableActivityEagerExecution=true",
		"--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
		"--dynamic-config-value", "matching.numTaskqueueWritePartitions=1")
	hostPort := "127.0.0.1:" + strconv.Itoa(port)
	p.start(t)
	waitTemporal(t, p, hostPort)
	t.Cleanup(func() { p.kill(t) })
	return p, hostPort
}

func waitTemporal(t *testing.T, p *proc, hostPort string) {
	t.Helper()
	poll.Until(t, 60*time.Second, "Temporal at "+hostPort+" to be healthy", func() (bool, string) {
		if ok, code := p.exited(); ok {
			b, _ := os.ReadFile(p.log)
			t.Fatalf("temporal exited (status %d); log:\n%s", code, tail(b, 3000))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := client.DialContext(ctx, client.Options{HostPort: hostPort, Logger: quietLogger{}})
		if err == nil {
			_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
			c.Close()
		}
		return err == nil, fmt.Sprintf("health check: %v", err)
	})
}

// waitHTTP waits until url answers 200.
func waitHTTP(t *testing.T, p *proc, url string, timeout time.Duration) {
	t.Helper()
	poll.Until(t, timeout, fmt.Sprintf("%s to answer 200 at %s", p.name, url), func() (bool, string) {
		if ok, code := p.exited(); ok {
			b, _ := os.ReadFile(p.log)
			t.Fatalf("%s exited (status %d); log:\n%s", p.name, code, tail(b, 3000))
		}
		resp, err := http.Get(url) //nolint:gosec,noctx // a loopback URL of the test's own server
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// quietLogger drops the Temporal client's logs while probing.
type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}
