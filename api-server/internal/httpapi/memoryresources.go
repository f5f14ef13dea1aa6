package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/db"
)

// Memory store resources (BetaManagedAgentsMemoryStoreResource): a memory
// store attached to a session, mounted in its sandbox at
// memoryMountDir/<name derived from the store's name>.
const (
	// memoryMountDir holds the session's memory stores, one folder each.
	memoryMountDir = "/mnt/memory"
	// MaxMemoryInstructions bounds a memory_store resource's instructions,
	// in characters.
	MaxMemoryInstructions = 4096
	// maxMemoryMountName bounds the derived folder name, in characters.
	maxMemoryMountName = 64
)

// memoryMountName derives a store's folder name from its name as the SDK
// documents it: lowercased, each run of characters other than ASCII
// letters and digits becomes one "-", trimmed of "-", at most 64
// characters; the store id when nothing is left.
func memoryMountName(name, storeID string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	s := strings.Trim(b.String(), "-")
	if len(s) > maxMemoryMountName {
		s = strings.Trim(s[:maxMemoryMountName], "-")
	}
	if s == "" {
		return storeID
	}
	return s
}

// memoryMountPath returns memoryMountDir/<name>, or <name>-2, -3, ... when
// an earlier resource of the session (taken) already has that path.
func memoryMountPath(name string, taken map[string]bool) string {
	base := memoryMountDir + "/" + name
	if !taken[base] {
		return base
	}
	for i := 2; ; i++ {
		if p := fmt.Sprintf("%s-%d", base, i); !taken[p] {
			return p
		}
	}
}

// parseMemoryStoreResource validates a memory_store resource: the store
// must exist and not be archived; its name and description are
// snapshotted. The mount path is left for the caller (assignMemoryMounts),
// who knows the session's other resources.
func (a *API) parseMemoryStoreResource(ctx context.Context, in *resourceInput, p string) (db.ResourceCreate, error) {
	rc := db.ResourceCreate{Type: db.ResourceMemoryStore}
	if in.FileID != nil || in.MountPath != nil || in.URL != nil || in.Checkout != nil || in.AuthorizationToken != nil {
		return rc, apierror.Invalid("%s: a memory_store resource takes memory_store_id, access and instructions only (its mount_path is derived from the store's name)", p)
	}
	if in.MemoryStoreID == nil || *in.MemoryStoreID == "" {
		return rc, apierror.Invalid("%s.memory_store_id: is required (memstore_...)", p)
	}
	id := *in.MemoryStoreID
	rc.Access = db.AccessReadWrite
	if in.Access != nil {
		if *in.Access != db.AccessReadWrite && *in.Access != db.AccessReadOnly {
			return rc, apierror.Invalid("%s.access: must be read_write or read_only, got %q", p, *in.Access)
		}
		rc.Access = *in.Access
	}
	if in.Instructions != nil {
		if !utf8.ValidString(*in.Instructions) {
			return rc, apierror.Invalid("%s.instructions: must be valid UTF-8 text", p)
		}
		if n := utf8.RuneCountInString(*in.Instructions); n > MaxMemoryInstructions {
			return rc, apierror.Invalid("%s.instructions: must be at most %d characters, got %d", p, MaxMemoryInstructions, n)
		}
		rc.Instructions = *in.Instructions
	}
	if !ids.Valid(ids.MemoryStore, id) {
		return rc, apierror.Invalid("%s.memory_store_id: %q is not a memory store id (memstore_...)", p, id)
	}
	ms, err := a.deps.Store.MemoryStoreGet(ctx, id)
	if errors.Is(err, db.ErrNotFound) {
		return rc, apierror.Invalid("%s.memory_store_id: memory store %q not found", p, id)
	}
	if err != nil {
		return rc, err
	}
	if ms.ArchivedAt != nil {
		return rc, apierror.Invalid("%s.memory_store_id: memory store %q is archived; only a store that is not archived can be attached", p, id)
	}
	rc.MemoryStoreID, rc.StoreName, rc.StoreDescription = ms.ID, ms.Name, ms.Description
	return rc, nil
}

// assignMemoryMounts gives each memory_store resource of rs its mount
// path, deduplicated against taken (the session's other mount paths) and
// against each other, in order.
func assignMemoryMounts(rs []db.ResourceCreate, taken map[string]bool) {
	for i := range rs {
		if rs[i].Type != db.ResourceMemoryStore {
			continue
		}
		rs[i].MountPath = memoryMountPath(memoryMountName(rs[i].StoreName, rs[i].MemoryStoreID), taken)
		taken[rs[i].MountPath] = true
	}
}

// memoryResourceResponse is a memory_store resource's wire form
// (BetaManagedAgentsMemoryStoreResource, with the id and timestamps every
// session resource has). mount_path is null for a self-hosted session:
// the SDK's worker then places the store under its working directory.
type memoryResourceResponse struct {
	Type          string    `json:"type"`
	ID            string    `json:"id"`
	MemoryStoreID string    `json:"memory_store_id"`
	Access        string    `json:"access"`
	Name          string    `json:"name"`
	Description   string    `json:"description"`
	Instructions  *string   `json:"instructions"`
	MountPath     *string   `json:"mount_path"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

func toMemoryResourceResponse(r *db.Resource, selfHosted bool) *memoryResourceResponse {
	out := &memoryResourceResponse{Type: r.Type, ID: r.ID, MemoryStoreID: r.MemoryStoreID, Access: r.Access, Name: r.StoreName,
		Description: r.StoreDescription, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if r.Instructions != "" {
		instr := r.Instructions
		out.Instructions = &instr
	}
	if !selfHosted {
		mount := r.MountPath
		out.MountPath = &mount
	}
	return out
}

// addMemoryResource adds a memory_store resource to a session at the
// first free mount path its store's name gives. A concurrent add that took
// the same path first is answered by trying the next one.
func (a *API) addMemoryResource(ctx context.Context, sess *db.Session, rc db.ResourceCreate) (*db.Resource, error) {
	const attempts = 3
	for i := 0; ; i++ {
		live, err := a.deps.Store.ResourceList(ctx, sess.ID, nil, db.MaxResourcesPerSession+1)
		if err != nil {
			return nil, err
		}
		rs := []db.ResourceCreate{rc}
		if sess.SelfHosted {
			if err := checkSelfHostedMemoryFolders(live, rs, ""); err != nil {
				return nil, err
			}
		}
		taken := make(map[string]bool, len(live))
		for _, r := range live {
			taken[r.MountPath] = true
		}
		assignMemoryMounts(rs, taken)
		r, err := a.deps.Store.ResourceAdd(ctx, sess.ID, rs[0], a.now())
		if errors.Is(err, db.ErrMountTaken) && i+1 < attempts {
			continue
		}
		return r, err
	}
}

// checkSelfHostedMemoryFolders refuses, for a self-hosted session, memory
// stores the SDK's worker cannot place: with mount_path null it uses
// {Workdir}/memory/<store name> (the store id when the name is empty), so
// the name must be one folder name and no other store of the session may
// have it. existing are the session's live resources, added the new ones
// (where names them in errors: "resources" or "").
func checkSelfHostedMemoryFolders(existing []*db.Resource, added []db.ResourceCreate, where string) error {
	taken := map[string]bool{}
	for _, r := range existing {
		if r.Type == db.ResourceMemoryStore {
			taken[cmp.Or(r.StoreName, r.MemoryStoreID)] = true
		}
	}
	for i, rc := range added {
		if rc.Type != db.ResourceMemoryStore {
			continue
		}
		p := where + ".memory_store_id"
		if where != "" {
			p = fmt.Sprintf("%s[%d].memory_store_id", where, i)
		}
		folder := cmp.Or(rc.StoreName, rc.MemoryStoreID)
		if folder == "." || folder == ".." || strings.ContainsAny(folder, `/\`) {
			return apierror.Invalid("%s: memory store %q is named %q, which is not one folder name (it is \".\" or \"..\" or holds a slash); "+
				"the SDK's worker of a self-hosted session places a store at memory/<store name>", p, rc.MemoryStoreID, rc.StoreName)
		}
		if taken[folder] {
			return apierror.Invalid("%s: another memory store of this self-hosted session is named %q; the SDK's worker places each store "+
				"at memory/<store name>, so the stores of a self-hosted session need distinct names", p, folder)
		}
		taken[folder] = true
	}
	return nil
}
