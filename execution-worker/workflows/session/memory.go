package session

import (
	"cmp"
	"context"
	"log/slog"
	"path"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sessionfiles"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// sessionMemoryStores returns the memory stores among a session's
// resources (deleted ones left out) as the system prompt lists them: at
// the resource's mount path in a cloud sandbox, or, in a self-hosted
// session (no mount path), under memory/<store name> relative to the
// working directory, where the SDK's worker puts them (the store id when
// the name is empty, as the SDK does).
func sessionMemoryStores(resources []*pb.SessionResource, selfHosted bool) []agentruntime.MemoryStore {
	var stores []agentruntime.MemoryStore
	for _, r := range resources {
		if r.GetType() != sessionfiles.MemoryStoreType || r.GetDeleted() {
			continue
		}
		where := r.GetMountPath()
		if selfHosted || where == "" {
			where = path.Join(sessionfiles.SelfHostedMemoryDir, cmp.Or(r.GetMemoryStoreName(), r.GetMemoryStoreId()))
		}
		stores = append(stores, agentruntime.MemoryStore{Name: r.GetMemoryStoreName(), Path: where, Access: r.GetMemoryAccess(),
			Description: r.GetMemoryStoreDescription(), Instructions: r.GetMemoryInstructions()})
	}
	return stores
}

// readOnlyMounts returns the mount paths of the session's read_only
// memory stores: the write and edit tools refuse paths in them.
func readOnlyMounts(resources []*pb.SessionResource) []string {
	var roots []string
	for _, r := range resources {
		if r.GetType() == sessionfiles.MemoryStoreType && !r.GetDeleted() &&
			r.GetMemoryAccess() == sessionfiles.MemoryReadOnly && r.GetMountPath() != "" {
			roots = append(roots, r.GetMountPath())
		}
	}
	return roots
}

// syncMemory syncs the memory store mounts of a turn's sandbox sb at the
// turn's end (also an interrupted one), before its outputs are published.
// A turn that never used its sandbox (sb nil) has nothing to sync.
// Conflicts and refusals are logged by the Materializer; an error
// (transport) fails the attempt, which Temporal retries.
func (a *TurnActivities) syncMemory(ctx context.Context, sid string, sb sandbox.Sandbox, tc *pb.TurnContext) error {
	if a.Resources == nil || sb == nil {
		return nil
	}
	var resources []*pb.SessionResource
	if tc != nil {
		resources = tc.GetResources()
		if !hasMemoryStore(resources) {
			return nil
		}
	}
	ctx, span := a.startSpan(ctx, "memory.sync")
	err := a.Resources.SyncMemory(ctx, sid, sb, resources)
	endSpan(span, err, "memory stores not synced")
	return err
}

// syncMemoryInterrupted is syncMemory for an interrupted turn, which ends
// whatever the sync's outcome: an error is logged, and what the sync could
// not save stays in the sandbox for the next placement's sync.
func (a *TurnActivities) syncMemoryInterrupted(ctx context.Context, sid string, sb sandbox.Sandbox, tc *pb.TurnContext) {
	if err := a.syncMemory(ctx, sid, sb, tc); err != nil {
		log := slog.Default()
		if a.Resources != nil && a.Resources.Logger != nil {
			log = a.Resources.Logger
		}
		log.WarnContext(ctx, "memory stores not synced at the end of an interrupted turn; the next placement syncs them", "session_id", sid, "error", err)
	}
}

func hasMemoryStore(resources []*pb.SessionResource) bool {
	for _, r := range resources {
		if r.GetType() == sessionfiles.MemoryStoreType && !r.GetDeleted() {
			return true
		}
	}
	return false
}
