package sandboxdocker

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// LabelWarm marks a container made for the warm pool. Its value is the
// pool key: a hash of everything the container was created with (image,
// limits, labels), so that only a Create that would have made the same
// container adopts it.
const LabelWarm = "mango.warm"

// warmPrefix starts the names of warm containers no session has adopted.
const warmPrefix = "mango-warm-"

// Timing of the pool.
const (
	// defaultWarmLease is how long a warm container may stay claimed
	// (unpaused, not yet renamed) or half made (created, not yet paused)
	// before TrimSpares takes its worker for dead and removes it. Both
	// steps take milliseconds.
	defaultWarmLease = time.Minute
	// defaultWarmEvery spaces the refill passes made without an adoption
	// (repairing what was removed behind the pool's back).
	defaultWarmEvery = 30 * time.Second
)

// warmPool keeps ready containers of the default image. Its state is the
// daemon's: any worker reaching the daemon with the same settings adopts
// from, refills and trims the same pool. A ready container is paused;
// unpausing it is the claim (the daemon lets exactly one of concurrent
// unpauses succeed), and renaming it to the session's container name is
// the adoption.
type warmPool struct {
	p      *Provider
	size   int
	image  string
	key    string            // LabelWarm of this provider's warm containers
	labels map[string]string // labels every container of this provider carries
	lease  time.Duration
	every  time.Duration

	kick chan struct{}
	stop context.CancelFunc
	done chan struct{}

	mu    sync.Mutex
	ready []warmRef            // candidates for adoption, as last seen (may be stale)
	seen  map[string]time.Time // id -> when first seen neither ready nor adopted
	// shells holds, by container id, the sandboxes of the warm containers
	// this process made, with their shells started before the pause: an
	// adoption in this process hands them to the session, whose first
	// command then costs no exec.
	shells map[string]*containerSandbox
}

// warmRef names a warm container.
type warmRef struct{ id, name string }

// newWarmPool prepares the pool of p (of size 0 when p keeps none, which
// still trims what an earlier configuration left).
func newWarmPool(p *Provider) *warmPool {
	opts := p.createOptions("", "", p.cfg.Image, nil)
	labels := opts.Config.Labels
	delete(labels, LabelKeyHash)
	delete(labels, LabelCreatedAt)
	b, _ := json.Marshal([]any{opts.Config, opts.HostConfig, opts.NetworkingConfig, opts.Platform}) // plain data: always marshals
	sum := sha256.Sum256(b)
	return &warmPool{p: p, size: p.cfg.WarmPool, image: p.cfg.Image, key: hex.EncodeToString(sum[:8]), labels: labels,
		lease: cmp.Or(p.cfg.warmLease, defaultWarmLease), every: cmp.Or(p.cfg.warmEvery, defaultWarmEvery),
		kick: make(chan struct{}, 1), seen: map[string]time.Time{}}
}

// start runs the refill loop until close.
func (w *warmPool) start() {
	if w.size == 0 {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	w.stop, w.done = stop, make(chan struct{})
	go w.run(ctx)
}

// close stops the refill loop and waits for it. Warm containers stay for
// the next worker.
func (w *warmPool) close() {
	if w.stop != nil {
		w.stop()
		<-w.done
	}
	w.pruneShells(nil)
}

// refill asks the loop for a pass soon.
func (w *warmPool) refill() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *warmPool) run(ctx context.Context) {
	defer close(w.done)
	log := slog.Default().With("component", "docker-warm-pool")
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.kick:
		}
		if err := w.fill(ctx); err != nil && ctx.Err() == nil {
			log.WarnContext(ctx, "warm pool refill failed", "image", w.image, "size", w.size, "err", err)
		}
		t.Reset(w.every)
	}
}

// fill lists the ready containers and makes the missing ones.
func (w *warmPool) fill(ctx context.Context) error {
	list, err := w.list(ctx)
	if err != nil {
		return err
	}
	var ready []warmRef
	for _, c := range list {
		if w.isReady(c) {
			ready = append(ready, warmRef{id: c.ID, name: warmName(c)})
		}
	}
	w.mu.Lock()
	w.ready = ready
	w.mu.Unlock()
	w.pruneShells(ready)
	for n := len(ready); n < w.size; n++ {
		c, err := w.make(ctx)
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.ready = append(w.ready, c)
		w.mu.Unlock()
	}
	return nil
}

// make creates, starts and pauses one warm container; one that cannot be
// started or paused is removed again (no adoption can claim it before its
// pause). A worker dying before the pause leaves it unready: TrimSpares
// removes it after the lease.
func (w *warmPool) make(ctx context.Context) (c warmRef, err error) {
	c = warmRef{name: fmt.Sprintf("%s%016x", warmPrefix, rand.Uint64())}
	opts := w.p.createOptions(c.name, "", w.image, nil)
	delete(opts.Config.Labels, LabelKeyHash)
	opts.Config.Labels[LabelWarm] = w.key
	id, err := w.p.createOrFind(ctx, c.name, "", w.image, opts)
	if err != nil {
		return c, fmt.Errorf("create warm container %s: %w", c.name, err)
	}
	c.id = id
	defer func() {
		if err != nil {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.lease/2)
			defer cancel()
			_ = w.p.remove(ctx, id)
		}
	}()
	if _, err := w.p.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return c, fmt.Errorf("start warm container %s: %w", c.name, err)
	}
	sb := w.p.newSandbox(sandbox.Ref{Provider: Name, ID: id})
	sb.hold()
	if err := sb.StartShell(ctx); err != nil {
		_ = sb.Close()
		sb = nil // adopted without ready shells, as by another worker
	}
	if err := w.pause(ctx, id); err != nil {
		if sb != nil {
			_ = sb.Close()
		}
		return c, fmt.Errorf("pause warm container %s: %w", c.name, err)
	}
	if sb != nil {
		w.mu.Lock()
		if w.shells == nil {
			w.shells = map[string]*containerSandbox{}
		}
		w.shells[id] = sb
		w.mu.Unlock()
	}
	return c, nil
}

// takeShells returns (and forgets) the sandbox made with the warm
// container id, or nil.
func (w *warmPool) takeShells(id string) *containerSandbox {
	w.mu.Lock()
	defer w.mu.Unlock()
	sb := w.shells[id]
	delete(w.shells, id)
	return sb
}

// pruneShells ends the held shells of warm containers that are no longer
// ready (adopted by another worker, trimmed, removed): none of this
// process's sessions will use them. ready nil prunes all.
func (w *warmPool) pruneShells(ready []warmRef) {
	w.mu.Lock()
	var gone []*containerSandbox
	for id, sb := range w.shells {
		if !slices.ContainsFunc(ready, func(c warmRef) bool { return c.id == id }) {
			gone = append(gone, sb)
			delete(w.shells, id)
		}
	}
	w.mu.Unlock()
	for _, sb := range gone {
		_ = sb.Close()
	}
}

// list returns the warm containers of this provider's installation (its
// labels) that no session adopted, whatever their key or state, sorted
// by name.
func (w *warmPool) list(ctx context.Context) ([]container.Summary, error) {
	filters := client.Filters{}.Add("label", LabelWarm)
	for k, v := range w.labels {
		filters = filters.Add("label", k+"="+v)
	}
	res, err := w.p.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filters})
	if err != nil {
		return nil, fmt.Errorf("list warm containers: %w", err)
	}
	var out []container.Summary
	for _, c := range res.Items {
		if strings.HasPrefix(warmName(c), warmPrefix) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b container.Summary) int { return strings.Compare(warmName(a), warmName(b)) })
	return out, nil
}

// isReady reports a paused warm container of this provider's key.
func (w *warmPool) isReady(c container.Summary) bool {
	return c.State == container.StatePaused && c.Labels[LabelWarm] == w.key
}

// warmName is a listed container's name without the leading slash.
func warmName(c container.Summary) string {
	if len(c.Names) == 0 {
		return ""
	}
	return strings.TrimPrefix(c.Names[0], "/")
}

// take removes a random candidate from the ready list.
func (w *warmPool) take() (warmRef, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.ready) == 0 {
		return warmRef{}, false
	}
	i := rand.IntN(len(w.ready))
	c := w.ready[i]
	w.ready = slices.Delete(w.ready, i, i+1)
	return c, true
}

// adopt gives the session whose container is named name a ready warm
// container, when the pool has one made as Create would make this one
// (the default image, no environment variables: packages and egress are
// applied after Create and do not matter). ok is false when it adopted
// none: Create then makes the container, or finds the session's own
// when a concurrent Create made or adopted it.
func (p *Provider) adopt(ctx context.Context, name, image string, env map[string]string) (sandbox.Sandbox, sandbox.Ref, bool, error) {
	w := p.pool
	if w.size == 0 || image != w.image || len(env) > 0 {
		return nil, sandbox.Ref{}, false, nil
	}
	defer w.refill()
	for {
		c, found := w.take()
		if !found {
			return nil, sandbox.Ref{}, false, nil
		}
		if err := w.claim(ctx, c); err != nil {
			if ctx.Err() != nil {
				return nil, sandbox.Ref{}, false, fmt.Errorf("create sandbox %s: %w", name, ctx.Err())
			}
			continue // adopted or trimmed by another worker meanwhile
		}
		adopted, err := w.bind(ctx, c, name)
		if err != nil {
			return nil, sandbox.Ref{}, false, fmt.Errorf("create sandbox %s: adopt warm container %s: %w", name, c.name, err)
		}
		if !adopted {
			return nil, sandbox.Ref{}, false, nil
		}
		ref := sandbox.Ref{Provider: Name, ID: c.id}
		if sb := w.takeShells(c.id); sb != nil {
			sb.release()
			return sb, ref, true, nil
		}
		return p.newSandbox(ref), ref, true, nil
	}
}

// claim takes c out of the pool by unpausing it: of concurrent claims
// (adoptions, trims, from any worker) exactly one succeeds, and a
// container that is no longer paused (adopted since it was listed) is
// refused.
func (w *warmPool) claim(ctx context.Context, c warmRef) error {
	_, err := w.p.cli.ContainerUnpause(ctx, c.id, client.ContainerUnpauseOptions{})
	return err
}

// bind renames the claimed c to the session's container name, by its
// warm name: a container adopted since it was listed (and paused since,
// behind the pool's back) is never renamed away from its session. Once
// c is claimed this finishes even if ctx ends (within half the lease),
// so that a cancelled Create does not waste it. adopted is false, with
// c back in the pool, when the session's container exists already.
func (w *warmPool) bind(ctx context.Context, c warmRef, name string) (adopted bool, err error) {
	detached := context.WithoutCancel(ctx)
	renameCtx, cancel := context.WithTimeout(detached, w.lease/2)
	defer cancel()
	_, err = w.p.cli.ContainerRename(renameCtx, c.name, client.ContainerRenameOptions{NewName: name})
	switch {
	case err == nil:
		return true, nil
	case cerrdefs.IsConflict(err) || cerrdefs.IsNotFound(err):
		// Not renamed: the session's name is taken (by a concurrent
		// Create), or c is no longer the warm container it was. Pause it
		// again, as it was. The pause has its own deadline: one that
		// comes too late leaves c claimed, for TrimSpares.
		pauseCtx, cancel := context.WithTimeout(detached, w.lease)
		defer cancel()
		perr := w.pause(pauseCtx, c.id)
		switch {
		case perr != nil && !cerrdefs.IsNotFound(perr):
			slog.Default().WarnContext(ctx, "warm container left claimed: pause after a refused rename failed", "component", "docker-warm-pool", "container", c.name, "err", perr)
		case perr == nil && cerrdefs.IsConflict(err):
			w.mu.Lock()
			w.ready = append(w.ready, c)
			w.mu.Unlock()
		}
		return false, nil
	default:
		// Unknown outcome: renamed, c is the session's container (Create
		// finds it by name); not, it stays claimed until TrimSpares
		// removes it.
		return false, err
	}
}

// pause pauses the container id, trying again while the daemon fails for
// a reason that may pass, until ctx ends or for at most half the lease:
// the cgroup freezer answers "unable to freeze" while a process of the
// container is busy in the kernel, as a shell of the worker that made the
// container is while it exits on the container's first unpause. A
// container that is gone or not running is not tried again. A pause is
// done once the daemon shows the container paused: on a loaded machine
// an accepted pause was seen to leave it running (the freeze undone when
// an exec of the container exited), and a pool that believes a running
// container paused could not claim it (a claim is an unpause).
func (w *warmPool) pause(ctx context.Context, id string) error {
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		_, err := w.p.cli.ContainerPause(ctx, id, client.ContainerPauseOptions{})
		if err != nil && (cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err)) {
			return struct{}{}, backoff.Permanent(err)
		}
		if err != nil {
			return struct{}{}, err
		}
		insp, err := w.p.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		switch {
		case err != nil && cerrdefs.IsNotFound(err):
			return struct{}{}, backoff.Permanent(err)
		case err != nil:
			return struct{}{}, err
		case insp.Container.State == nil || !insp.Container.State.Paused:
			return struct{}{}, fmt.Errorf("container %s is not paused after its pause, want paused", id)
		}
		return struct{}{}, nil
	}, backoff.WithBackOff(pauseBackOff()), backoff.WithMaxElapsedTime(w.lease/2))
	return err
}

// pauseBackOff is the wait between pause tries: 50 ms, growing to 500.
func pauseBackOff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.MaxInterval = 500 * time.Millisecond
	return b
}

// TrimSpares removes the warm containers the pool does not want: ready
// ones beyond MANGO_DOCKER_WARM_POOL (all of them when it is 0) or made
// with other settings (another image, other limits or labels), each
// claimed first as an adoption would claim it, so that one being adopted
// is never removed; and ones left claimed but not renamed, or created but
// not paused, by a worker that died: seen so in two passes a lease
// apart. Surplus is chosen by name, so that workers trimming one daemon
// at once keep the same containers.
func (p *Provider) TrimSpares(ctx context.Context) ([]sandbox.Ref, error) {
	w := p.pool
	list, err := w.list(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var trimmed []sandbox.Ref
	kept := 0
	unready := map[string]bool{}
	for _, c := range list {
		switch {
		case w.isReady(c) && kept < w.size:
			kept++
			continue
		case c.State == container.StatePaused:
			if err := w.claim(ctx, warmRef{id: c.ID}); err != nil {
				continue // claimed by an adoption, or gone
			}
		default:
			unready[c.ID] = true
			if !w.stale(c.ID, now) {
				continue
			}
			insp, err := p.cli.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
			if cerrdefs.IsNotFound(err) {
				continue
			}
			if err != nil {
				return trimmed, fmt.Errorf("inspect warm container %s: %w", warmName(c), err)
			}
			if !strings.HasPrefix(strings.TrimPrefix(insp.Container.Name, "/"), warmPrefix) ||
				(insp.Container.State != nil && insp.Container.State.Paused) {
				continue // adopted, or back in the pool
			}
		}
		if err := p.remove(ctx, c.ID); err != nil {
			return trimmed, err
		}
		trimmed = append(trimmed, sandbox.Ref{Provider: Name, ID: c.ID})
	}
	w.mu.Lock()
	maps.DeleteFunc(w.seen, func(id string, _ time.Time) bool { return !unready[id] })
	w.mu.Unlock()
	return trimmed, nil
}

// stale records when the unready container id was first seen and
// reports whether that was a lease ago.
func (w *warmPool) stale(id string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	first, ok := w.seen[id]
	if !ok {
		w.seen[id] = now
		return false
	}
	return now.Sub(first) >= w.lease
}

// ownerView returns the configuration checkOwner judges c by. A warm
// container keeps the labels the pool made it with (Docker labels
// cannot change): once adopted, renamed to a session's container name,
// it belongs to the session that name is made from.
func ownerView(c container.InspectResponse) *container.Config {
	cfg := c.Config
	if cfg == nil || cfg.Labels[LabelWarm] == "" {
		return cfg
	}
	view := *cfg
	view.Labels = maps.Clone(cfg.Labels)
	view.Labels[LabelKeyHash], _ = adoptedHash(c.Name)
	return &view
}

// warmOwned completes what List reports of a warm container: an adopted
// one belongs to the session its name is made from; one not adopted is a
// spare.
func warmOwned(c container.Summary, o sandbox.Owned) sandbox.Owned {
	if c.Labels[LabelWarm] == "" {
		return o
	}
	hash, adopted := adoptedHash(warmName(c))
	o.KeyHash, o.Spare = hash, !adopted
	return o
}

// adoptedHash returns the session key hash a container name is made from
// (ContainerName), and false for any other name.
func adoptedHash(name string) (string, bool) {
	hash, ok := strings.CutPrefix(strings.TrimPrefix(name, "/"), "mango-")
	if !ok || len(hash) != 32 {
		return "", false
	}
	if _, err := hex.DecodeString(hash); err != nil || strings.ToLower(hash) != hash {
		return "", false
	}
	return hash, true
}

var _ sandbox.SpareTrimmer = (*Provider)(nil)
