package sandboxlocal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/mangohq/mango/execution-worker/internal/defaults"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellsession"
)

// shellArgv is the persistent shell: bash when the host has it (what a
// model expects of a shell), else /bin/sh.
var shellArgv = sync.OnceValue(func() []string {
	for _, p := range []string{"/bin/bash", "/usr/bin/bash"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return []string{p, "--noprofile", "--norc"}
		}
	}
	return []string{"/bin/sh"}
})

// sessionView is how the local shells see the session directories. With
// user and mount namespaces (Linux, where the kernel and the worker's
// seccomp profile allow unprivileged user namespaces), each shell runs in
// a private mount namespace in which a small tmpfs covers /mnt and the
// workspace's mnt/session and mnt/memory are bind-mounted at /mnt/session
// and /mnt/memory, so commands use the same absolute paths as the file
// tools and container providers. Without them commands reach those
// directories only through the workspace (./mnt/session/...,
// ./mnt/memory/...).
type sessionView struct {
	once  sync.Once
	mount string // the mount program; "" when the view is unavailable
	why   string // why it is unavailable
}

// available reports whether shells get the session roots, probing once: a
// shell started in new namespaces must mount a directory at /mnt/session
// and at /mnt/memory.
func (v *sessionView) available() bool {
	v.once.Do(func() {
		mount, err := exec.LookPath("mount")
		if err != nil {
			for _, p := range []string{"/bin/mount", "/usr/bin/mount", "/sbin/mount"} {
				if _, serr := os.Stat(p); serr == nil {
					mount, err = p, nil
					break
				}
			}
		}
		if err != nil {
			v.why = "no mount program"
			return
		}
		dir, err := os.MkdirTemp("", "mango-mount-probe-")
		if err != nil {
			v.why = err.Error()
			return
		}
		defer func() { _ = os.RemoveAll(dir) }()
		probe := "true"
		for _, root := range sandbox.SessionRoots {
			if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(root), "probe"), 0o700); err != nil {
				v.why = err.Error()
				return
			}
			probe += " && test -d " + root + "/probe"
		}
		cmd := exec.Command("/bin/sh", "-c", mountScript(mount, dir)+" && "+probe)
		cmd.SysProcAttr = namespaceAttr()
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}
		if out, err := cmd.CombinedOutput(); err != nil {
			v.why = strings.TrimSpace(fmt.Sprintf("%v: %s", err, out))
			return
		}
		v.mount = mount
	})
	return v.mount != ""
}

// namespaceAttr puts a process in new user and mount namespaces, mapped to
// root inside (which may mount there) and to the worker's own user and
// group outside: files it creates belong to the worker's user.
func namespaceAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
	}
}

// mountScript covers /mnt with a tmpfs in the shell's own mount namespace
// and binds the workspace's session roots at /mnt/session and /mnt/memory.
// The sources must exist (see [makeSessionRoots]).
func mountScript(mount, workspace string) string {
	m := shellexec.Quote(mount)
	script := m + " -t tmpfs -o mode=0755,size=64k mango-session /mnt"
	for _, root := range sandbox.SessionRoots {
		src := shellexec.Quote(filepath.Join(workspace, filepath.FromSlash(root)))
		script += " && mkdir " + root + " && " + m + " --bind " + src + " " + root
	}
	return script
}

// makeSessionRoots creates the workspace's directories that mountScript
// binds at the session roots.
func makeSessionRoots(workspace string) error {
	for _, root := range sandbox.SessionRoots {
		if err := os.MkdirAll(filepath.Join(workspace, filepath.FromSlash(root)), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// shells returns the sandbox's persistent shells, one per shell key.
func (s *localSandbox) shells() *shellsession.Keyed {
	s.shellOnce.Do(func() {
		s.sh = shellsession.NewKeyed(func() *shellsession.Session {
			return shellsession.New(s.startShell, shellsession.Options{Root: s.dir, IdleTimeout: sandbox.ShellIdleTimeout})
		}, sandbox.MaxShellKeys)
	})
	return s.sh
}

// startShell starts a persistent shell in the workspace with the commands'
// environment, in the session view when the host allows it.
func (s *localSandbox) startShell(context.Context) (shellsession.Process, error) {
	env, err := s.environ(nil)
	if err != nil {
		return nil, err
	}
	argv := shellArgv()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = s.dir, env
	view := s.p.view.available() && !under(s.dir, "/mnt")
	if view {
		if err := makeSessionRoots(s.dir); err != nil {
			return nil, err
		}
		cmd.SysProcAttr = namespaceAttr()
	}
	proc, err := shellsession.StartCommand(cmd)
	if err != nil {
		return nil, err
	}
	if view {
		// Written before the session's setup, so it runs first; its
		// errors are start-up noise the session discards.
		if _, err := proc.Stdin().Write([]byte(mountScript(s.p.view.mount, s.dir) + "\n")); err != nil {
			proc.Kill()
			return nil, err
		}
	}
	return proc, nil
}

// under reports whether p is dir or inside it.
func under(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}

// ShellExec runs req.Command in the persistent shell of ctx's shell key;
// see [sandbox.Shell].
func (s *localSandbox) ShellExec(ctx context.Context, req sandbox.ExecRequest) (*sandbox.ShellResult, error) {
	if err := s.runnable(ctx); err != nil {
		return nil, err
	}
	timeout := defaults.Positive(req.Timeout, s.p.execTimeout)
	limit := defaults.Positive(req.MaxOutput, s.p.maxOutput)
	res, err := s.shells().Run(ctx, sandbox.ShellKey(ctx), req, timeout, limit)
	if errors.Is(err, shellsession.ErrClosed) || err != nil && s.destroyed() {
		return nil, sandbox.ErrDestroyed
	}
	return res, err
}

// RestartShell kills the persistent shell of ctx's shell key; see
// [sandbox.Shell].
func (s *localSandbox) RestartShell(ctx context.Context) error {
	if s.destroyed() {
		return sandbox.ErrDestroyed
	}
	return s.shells().Restart(ctx, sandbox.ShellKey(ctx))
}

// StartShell starts the persistent shell of ctx's shell key early; see
// [sandbox.Shell].
func (s *localSandbox) StartShell(ctx context.Context) error {
	if s.destroyed() {
		return sandbox.ErrDestroyed
	}
	return s.shells().Start(ctx, sandbox.ShellKey(ctx))
}

// Close ends the sandbox's persistent shells, of every key (the workspace
// stays). The SessionManager calls it when it drops the sandbox from its
// cache.
func (s *localSandbox) Close() error {
	s.shells().Close()
	return nil
}

var _ sandbox.Shell = (*localSandbox)(nil)

// SessionPathsVisible reports whether p's shells see the session
// directories at /mnt/session and /mnt/memory (probing once).
func SessionPathsVisible(p *Provider) bool { return p.view.available() }

// SessionPathsUnavailable says why p's shells do not see /mnt/session and
// /mnt/memory ("" when they do).
func SessionPathsUnavailable(p *Provider) string {
	p.view.available()
	return p.view.why
}
