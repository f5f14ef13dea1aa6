package db

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// MemoryReadForSession returns the store's current memories (paths
// relative to its root) and records them as the base of (sessionID,
// resourceID) in the same transaction, which holds the store's lock so no
// write falls between the read and the base. ErrNotFound when the store
// is gone.
func (s *Store) MemoryReadForSession(ctx context.Context, sessionID, resourceID, storeID string) ([]MemoryFile, error) {
	var out []MemoryFile
	err := s.inTx(ctx, "read memory store", func(q *dbsqlc.Queries) error {
		if _, err := q.MemoryStoreLock(ctx, storeID); err != nil {
			return fmt.Errorf("memory store %s: %w", storeID, mapErr("lock memory store", err))
		}
		rows, err := q.MemoryListAll(ctx, storeID)
		if err != nil {
			return err
		}
		arg := dbsqlc.MemoryBaseSetManyParams{SessionID: sessionID, ResourceID: resourceID,
			Paths: make([]string, 0, len(rows)), Sha256s: make([]string, 0, len(rows))}
		out = make([]MemoryFile, 0, len(rows))
		for _, r := range rows {
			out = append(out, MemoryFile{Path: strings.TrimPrefix(r.Path, "/"), Content: []byte(r.Content), SHA256: r.ContentSha256})
			arg.Paths, arg.Sha256s = append(arg.Paths, r.Path), append(arg.Sha256s, r.ContentSha256)
		}
		if err := q.MemoryBaseClear(ctx, dbsqlc.MemoryBaseClearParams{SessionID: sessionID, ResourceID: resourceID}); err != nil {
			return err
		}
		return q.MemoryBaseSetMany(ctx, arg)
	})
	return out, err
}

// MemoryBase returns the base of (sessionID, resourceID): relative path →
// content SHA-256 (empty when the store was never placed).
func (s *Store) MemoryBase(ctx context.Context, sessionID, resourceID string) (map[string]string, error) {
	rows, err := s.q.MemoryBaseGet(ctx, dbsqlc.MemoryBaseGetParams{SessionID: sessionID, ResourceID: resourceID})
	if err != nil {
		return nil, mapErr("get memory base", err)
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[strings.TrimPrefix(r.Path, "/")] = r.ContentSha256
	}
	return out, nil
}

// MemorySyncApply applies what a session's agent changed under a
// memory_store mount, under the store's row lock, each change decided on
// its own against the stored base (relative paths in and out):
//
//   - the memory already holds the content sent (or is absent for a
//     deletion): MemoryUnchanged (a retried sync); base := content.
//   - the memory is what the base says (absent when the base has no
//     entry): MemoryApplied, a new version (created, modified or deleted)
//     by {session_actor, sessionID}; base := the new content (or no entry).
//   - otherwise the memory changed through the API meanwhile:
//     MemoryConflict. The API's content stays; new content of the agent is
//     saved at "<path without ext>.conflict-<session id><ext>" (created,
//     or modified when that path exists); a losing deletion is dropped.
//     The base := what the sandbox holds (the agent's content, or no entry
//     for a deletion), so that a later sync before the next placement
//     does not report the change again and apply it over the API's edit;
//     the next placement replaces the sandbox's copy.
//   - readOnly, an archived store, an invalid path or content:
//     MemoryRefused with a reason; nothing is written, the base is kept.
//
// ErrNotFound when the store is gone.
func (s *Store) MemorySyncApply(ctx context.Context, sessionID, resourceID, storeID string, readOnly bool, changes []MemoryChange, now time.Time) ([]MemoryChangeResult, error) {
	out := make([]MemoryChangeResult, 0, len(changes))
	err := s.inTx(ctx, "sync memory store", func(q *dbsqlc.Queries) error {
		out = out[:0]
		st, err := q.MemoryStoreLock(ctx, storeID)
		if err != nil {
			return fmt.Errorf("memory store %s: %w", storeID, mapErr("lock memory store", err))
		}
		sy := &memSync{w: memWriter{q: q, storeID: storeID, actor: Actor{Type: ActorSession, ID: sessionID}, now: now},
			sessionID: sessionID, resourceID: resourceID}
		if sy.base, err = s.memoryBaseTx(ctx, q, sessionID, resourceID); err != nil {
			return err
		}
		for _, ch := range changes {
			res := MemoryChangeResult{Path: ch.Path}
			switch {
			case st.ArchivedAt != nil:
				res.Outcome, res.Reason = MemoryRefused, fmt.Sprintf("memory store %s is archived and read-only", storeID)
			case readOnly:
				res.Outcome, res.Reason = MemoryRefused, fmt.Sprintf("memory store %s is attached read_only to this session", storeID)
			default:
				if res, err = sy.apply(ctx, ch); err != nil {
					return err
				}
			}
			out = append(out, res)
		}
		return nil
	})
	return out, err
}

// memoryBaseTx reads the base (wire paths) inside a transaction.
func (s *Store) memoryBaseTx(ctx context.Context, q *dbsqlc.Queries, sessionID, resourceID string) (map[string]string, error) {
	rows, err := q.MemoryBaseGet(ctx, dbsqlc.MemoryBaseGetParams{SessionID: sessionID, ResourceID: resourceID})
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.Path] = r.ContentSha256
	}
	return out, nil
}

// memSync decides and applies a sync's changes (MemorySyncApply).
type memSync struct {
	w                     memWriter
	sessionID, resourceID string
	base                  map[string]string
}

func (sy *memSync) setBase(ctx context.Context, p, sha string, present bool) error {
	if !present {
		delete(sy.base, p)
		return sy.w.q.MemoryBaseDelete(ctx, dbsqlc.MemoryBaseDeleteParams{SessionID: sy.sessionID, ResourceID: sy.resourceID, Path: p})
	}
	sy.base[p] = sha
	return sy.w.q.MemoryBaseSet(ctx, dbsqlc.MemoryBaseSetParams{SessionID: sy.sessionID, ResourceID: sy.resourceID, Path: p, ContentSha256: sha})
}

// validate returns why a change is refused ("" : valid) and its hash.
func validateChange(wire string, ch MemoryChange) (reason, sha string) {
	if err := ValidateMemoryPath(wire); err != nil {
		return err.Error(), ""
	}
	if ch.Deleted {
		return "", ""
	}
	if err := ValidateMemoryContent(ch.Content); err != nil {
		return fmt.Sprintf("%s: %v", ch.Path, err), ""
	}
	sha = ContentSHA256(ch.Content)
	if ch.SHA256 != "" && ch.SHA256 != sha {
		return fmt.Sprintf("%s: content_sha256 %s does not match the content sent (its hash is %s)", ch.Path, ch.SHA256, sha), ""
	}
	return "", sha
}

// apply decides one change; an error fails the whole sync.
func (sy *memSync) apply(ctx context.Context, ch MemoryChange) (MemoryChangeResult, error) {
	res := MemoryChangeResult{Path: ch.Path}
	wire := "/" + ch.Path
	reason, sha := validateChange(wire, ch)
	if reason != "" {
		res.Outcome, res.Reason = MemoryRefused, reason
		return res, nil
	}
	cur, err := memoryByPath(ctx, sy.w.q, sy.w.storeID, wire)
	if err != nil {
		return res, err
	}
	if (ch.Deleted && cur == nil) || (!ch.Deleted && cur != nil && cur.SHA256 == sha) {
		res.Outcome = MemoryUnchanged
		return res, sy.setBase(ctx, wire, sha, !ch.Deleted)
	}
	baseSHA, inBase := sy.base[wire]
	if (!inBase && cur == nil) || (inBase && cur != nil && cur.SHA256 == baseSHA) {
		return sy.applyChange(ctx, ch, wire, sha, cur)
	}
	res.Outcome = MemoryConflict
	if !ch.Deleted {
		cp, reason, err := sy.saveConflict(ctx, wire, string(ch.Content))
		if err != nil {
			return res, err
		}
		if reason != "" {
			res.Outcome, res.Reason = MemoryRefused, reason
			return res, nil
		}
		res.ConflictPath = strings.TrimPrefix(cp, "/")
	}
	return res, sy.setBase(ctx, wire, sha, !ch.Deleted)
}

// applyChange writes a change whose memory is still what the base says.
func (sy *memSync) applyChange(ctx context.Context, ch MemoryChange, wire, sha string, cur *Memory) (MemoryChangeResult, error) {
	res := MemoryChangeResult{Path: ch.Path, Outcome: MemoryApplied}
	var err error
	switch {
	case ch.Deleted:
		err = sy.w.remove(ctx, cur)
	case cur == nil:
		_, err = sy.w.create(ctx, wire, string(ch.Content))
	default:
		_, err = sy.w.modify(ctx, cur, wire, string(ch.Content))
	}
	if reason := clashReason(err); reason != "" {
		res.Outcome, res.Reason = MemoryRefused, reason
		return res, nil
	}
	if err != nil {
		return res, err
	}
	return res, sy.setBase(ctx, wire, sha, !ch.Deleted)
}

// clashReason is the refusal reason of a path clash ("" : err is not one).
func clashReason(err error) string {
	var clash *MemoryPathClashError
	if err != nil && (errors.As(err, &clash) || errors.Is(err, ErrMemoryPathTaken)) {
		return err.Error()
	}
	return ""
}

// saveConflict saves the agent's losing content at the conflict path of
// wire, returning that path, or a refusal reason.
func (sy *memSync) saveConflict(ctx context.Context, wire, content string) (string, string, error) {
	cp := conflictPath(wire, sy.sessionID)
	if err := ValidateMemoryPath(cp); err != nil {
		return "", fmt.Sprintf("%s changed through the API and the conflict copy cannot be saved: %v", wire, err), nil
	}
	existing, err := memoryByPath(ctx, sy.w.q, sy.w.storeID, cp)
	if err != nil {
		return "", "", err
	}
	if existing != nil {
		_, err = sy.w.modify(ctx, existing, cp, content)
	} else {
		_, err = sy.w.create(ctx, cp, content)
	}
	if reason := clashReason(err); reason != "" {
		return "", reason, nil
	}
	return cp, "", err
}

// MemoryStoreAccess returns the access a session has to a store through
// its live memory_store resources: AccessReadWrite when one grants it,
// AccessReadOnly, or "" when the session has none of the store.
func (s *Store) MemoryStoreAccess(ctx context.Context, storeID, sessionID string) (string, error) {
	rows, err := s.q.MemoryStoreAccessOfSession(ctx, dbsqlc.MemoryStoreAccessOfSessionParams{StoreID: storeID, SessionID: sessionID})
	if err != nil {
		return "", mapErr("get memory store access", err)
	}
	out := ""
	for _, a := range rows {
		if a == AccessReadWrite {
			return a, nil
		}
		out = a
	}
	return out, nil
}
