package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mangohq/mango/api-server/internal/agentspec"
	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/db"
)

// Rosters of multiagent agents. The agents a multiagent configuration
// names (a coordinator's agents, multiagent_20261001's
// subagents.predefined_agents) are resolved when a version is written: on
// agent create, and on agent update when it sends multiagent (the merged
// configuration is checked whole; an update that omits multiagent keeps
// the stored one as it is). An entry without a version pins the agent's
// latest version, an explicit version must exist. A named agent must
// exist, must not be archived, and its pinned version must not have
// multiagent set itself (depth limit 1).
//
// The owner may name itself once, by self or, once it exists, by its id;
// that entry is exempt from the depth limit (it is the recursive
// self-invocation self stands for). Self is resolved to a concrete agent
// reference, as the SDK's response types carry: the owner's id at the
// version being written, and so is the owner's id without a version.
//
// A session's agent snapshot carries the roster expanded (sessionRoster):
// each entry is the agent's own snapshot at its pinned version, as the
// SDK's session types carry it, and as the session's threads run it.

// rosterOwner is the agent whose version is being written.
type rosterOwner struct {
	ID      string
	Version int64 // the version being written
}

// resolvedRoster is a multiagent configuration whose entries are pinned.
type resolvedRoster struct {
	m *agentspec.Multiagent
	// ownPins are the entries pinned to the version being written.
	ownPins []*agentspec.RosterEntry
}

// pinned encodes the configuration with the entries pinned to the
// version being written set to version instead: an update compares the
// configuration pinned at the current version with the stored one, so
// that resending an unchanged configuration with self writes no version.
func (r *resolvedRoster) pinned(version int64) json.RawMessage {
	for _, e := range r.ownPins {
		e.Version = version
	}
	return r.m.Marshal()
}

// resolveRoster resolves the roster of a configuration (agentspec's
// stored form, null for none).
func (a *API) resolveRoster(ctx context.Context, raw json.RawMessage, owner rosterOwner) (*resolvedRoster, error) {
	m, err := agentspec.ParseMultiagent(raw)
	if err != nil || m == nil {
		return &resolvedRoster{m: m}, err
	}
	r := &resolvedRoster{m: m}
	ownPath := ""
	for _, ref := range m.Entries() {
		e := ref.Entry
		if e.Type != agentspec.EntrySelf && e.ID != owner.ID {
			if err := a.pinRosterAgent(ctx, ref); err != nil {
				return nil, err
			}
			continue
		}
		if ownPath != "" {
			return nil, apierror.Invalid("%s: names agent %q itself, as %s does; entries must name distinct agents", ref.Path, owner.ID, ownPath)
		}
		ownPath = ref.Path
		pin, err := pinOwner(ref, owner)
		if err != nil {
			return nil, err
		}
		if pin {
			r.ownPins = append(r.ownPins, e)
		}
	}
	return r, nil
}

// pinOwner resolves the entry naming the owner and reports whether it is
// pinned to the version being written.
func pinOwner(ref agentspec.RosterRef, owner rosterOwner) (bool, error) {
	e := ref.Entry
	switch {
	case e.Type == agentspec.EntrySelf || e.Version == 0:
		*e = agentspec.RosterEntry{Type: agentspec.EntryAgent, ID: owner.ID, Version: owner.Version}
		return true, nil
	case e.Version >= owner.Version:
		return false, apierror.Invalid("%s.version: agent %q has no version %d yet (this write creates version %d; omit version or send {\"type\":\"self\"} to name it)",
			ref.Path, e.ID, e.Version, owner.Version)
	}
	return false, nil
}

// pinRosterAgent resolves an entry naming another agent.
func (a *API) pinRosterAgent(ctx context.Context, ref agentspec.RosterRef) error {
	e := ref.Entry
	var ag *db.Agent
	err := db.ErrNotFound
	if ids.Valid(ids.Agent, e.ID) {
		ag, err = a.deps.Store.AgentGet(ctx, e.ID)
	}
	switch {
	case errors.Is(err, db.ErrNotFound):
		return apierror.Invalid("%s: no agent %q", ref.Path, e.ID)
	case err != nil:
		return err
	case ag.ArchivedAt != nil:
		return apierror.Invalid("%s: agent %q is archived; a roster can name only agents that are not archived", ref.Path, e.ID)
	}
	if e.Version != 0 && e.Version != ag.Version {
		latest := ag.Version
		ag, err = a.deps.Store.AgentGetVersion(ctx, e.ID, e.Version)
		switch {
		case errors.Is(err, db.ErrNotFound):
			return apierror.Invalid("%s.version: agent %q has no version %d (its latest is %d; omit version to pin it)", ref.Path, e.ID, e.Version, latest)
		case err != nil:
			return err
		}
	}
	var spec struct {
		Multiagent json.RawMessage `json:"multiagent"`
	}
	if err := json.Unmarshal(ag.Spec, &spec); err != nil {
		return fmt.Errorf("decode stored spec of agent %s v%d: %w", ag.ID, ag.Version, err)
	}
	nested, err := agentspec.ParseMultiagent(spec.Multiagent)
	if err != nil {
		return fmt.Errorf("agent %s v%d: %w", ag.ID, ag.Version, err)
	}
	if nested != nil {
		return apierror.Invalid("%s: agent %q version %d has multiagent set; an agent in a roster cannot orchestrate agents itself (depth limit 1)",
			ref.Path, e.ID, ag.Version)
	}
	e.Version = ag.Version
	return nil
}

// sessionRoster expands the roster of a session's agent snapshot: each
// entry becomes the snapshot of the agent at its pinned version
// (BetaManagedAgentsSessionThreadAgent), without multiagent (delegation is
// one level deep). The entry naming the session's own agent version is
// the snapshot itself, with the session's overrides (they apply to the
// coordinator and its self copies).
func (a *API) sessionRoster(ctx context.Context, snap *agentspec.Snapshot) error {
	m, err := agentspec.ParseMultiagent(snap.Multiagent)
	if err != nil || m == nil {
		return err
	}
	expand := func(entries []agentspec.RosterEntry) ([]json.RawMessage, error) {
		out := make([]json.RawMessage, 0, len(entries))
		for _, e := range entries {
			member, err := a.rosterMember(ctx, snap, e)
			if err != nil {
				return nil, err
			}
			out = append(out, member)
		}
		return out, nil
	}
	var doc map[string]any
	if err := json.Unmarshal(snap.Multiagent, &doc); err != nil {
		return fmt.Errorf("decode the multiagent of agent %s: %w", snap.ID, err)
	}
	switch {
	case m.Type == agentspec.Coordinator:
		if doc["agents"], err = expand(m.Agents); err != nil {
			return err
		}
	case m.Subagents != nil && m.Subagents.Type == agentspec.Enabled:
		sub, _ := doc["subagents"].(map[string]any)
		if sub["predefined_agents"], err = expand(m.Subagents.PredefinedAgents); err != nil {
			return err
		}
	}
	snap.Multiagent, err = json.Marshal(doc)
	return err
}

// rosterMember is the snapshot of roster entry e of the session agent
// snap, without multiagent.
func (a *API) rosterMember(ctx context.Context, snap *agentspec.Snapshot, e agentspec.RosterEntry) (json.RawMessage, error) {
	member := *snap
	if e.ID != snap.ID || e.Version != snap.Version {
		ag, err := a.deps.Store.AgentGetVersion(ctx, e.ID, e.Version)
		if err != nil {
			return nil, fmt.Errorf("roster agent %s version %d: %w", e.ID, e.Version, err)
		}
		var spec agentspec.Spec
		if err := json.Unmarshal(ag.Spec, &spec); err != nil {
			return nil, fmt.Errorf("decode roster agent %s: %w", e.ID, err)
		}
		member = *agentspec.SnapshotOf(ag.ID, ag.Version, &spec)
	}
	b, err := json.Marshal(member)
	if err != nil {
		return nil, err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, err
	}
	delete(obj, "multiagent")
	return json.Marshal(obj)
}
