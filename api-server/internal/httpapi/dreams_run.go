package httpapi

// A dream runs as a session: the api-server makes its agent (one per
// dream), its output store (create_new: a copy of the input store) and a
// session with the output store attached read_write (and the input store
// read_only for create_new), whose first user.message holds the dream's
// instructions and the input sessions' transcripts.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/mangohq/mango/api-server/internal/agentspec"
	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/eventspec"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/db"
)

// maxDreamTranscript bounds the transcripts a dream's first message
// holds (newest sessions first; the rest is cut).
const maxDreamTranscript = 200 * 1024

// Where a dream's session mounts its output store (read_write) and, for
// create_new, its input store (read_only).
const (
	dreamOutputMount = memoryMountDir + "/dream-output"
	dreamInputMount  = memoryMountDir + "/dream-input"
)

const dreamSystemPrompt = `You are a dream: an offline job that reorganises a memory store.
Read the transcripts of past sessions in the user's message and the memory store mounted read_write (its path is in the message and in the memory section below).
Rewrite the store so it holds what is worth remembering from those sessions: merge duplicates, fix outdated facts, keep files small and well named.
Follow the user's instructions, write only under the output store's mount, and end with a one-line summary of what you changed.`

func (a *API) dreamCreate(c echo.Context) error {
	var in dreamCreateInput
	if err := a.bindObject(c, &in); err != nil {
		return err
	}
	r, err := parseDreamRequest(&in)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	input, err := a.deps.Store.MemoryStoreGet(ctx, r.StoreID)
	if errors.Is(err, db.ErrNotFound) {
		return apierror.Invalid("inputs: memory store %q not found", r.StoreID)
	}
	if err != nil {
		return err
	}
	if r.UpdateExisting && input.ArchivedAt != nil {
		return apierror.Invalid("output_behavior: memory store %q is archived and read-only; use create_new", r.StoreID)
	}
	sessions, err := a.dreamSessions(ctx, r.SessionIDs)
	if err != nil {
		return err
	}
	id := ids.New(ids.Dream)
	agentID, err := a.dreamAgent(ctx, id, r.ModelID)
	if err != nil {
		return err
	}
	output := input
	if !r.UpdateExisting {
		if output, err = a.copyMemoryStore(c, input, id); err != nil {
			return err
		}
	}
	d, err := a.startDream(c, id, agentID, r, input, output, sessions)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toDreamResponse(d))
}

// dreamSessions loads the input sessions, newest first.
func (a *API) dreamSessions(ctx context.Context, list []string) ([]*db.Session, error) {
	out := make([]*db.Session, 0, len(list))
	for _, sid := range list {
		s, err := a.deps.Store.SessionGet(ctx, sid)
		if errors.Is(err, db.ErrNotFound) {
			return nil, apierror.Invalid("inputs: session %q not found", sid)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	for i := 1; i < len(out); i++ { // few sessions: insertion sort, newest first
		for j := i; j > 0 && out[j].CreatedAt.After(out[j-1].CreatedAt); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	if out[0].EnvironmentID == nil {
		return nil, apierror.Invalid("inputs: session %q has no environment for the dream to run in", out[0].ID)
	}
	return out, nil
}

// dreamAgent creates the dream's agent: its model, the dream's system
// prompt and the default agent toolset.
func (a *API) dreamAgent(ctx context.Context, dreamID, model string) (string, error) {
	raw, err := json.Marshal(map[string]any{"name": "dream " + dreamID, "model": model, "system": dreamSystemPrompt,
		"tools": []any{map[string]any{"type": "agent_toolset_20260401"}}})
	if err != nil {
		return "", err
	}
	in, err := agentspec.ParseInput(raw)
	if err != nil {
		return "", err
	}
	spec, err := agentspec.Create(in)
	if err != nil {
		var ae *apierror.Error
		if errors.As(err, &ae) {
			return "", apierror.Invalid("model: %s", ae.Message)
		}
		return "", err
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	ag, err := a.deps.Store.AgentCreate(ctx, ids.New(ids.Agent), specJSON, nil, a.now())
	if err != nil {
		return "", fmt.Errorf("create the agent of dream %s: %w", dreamID, err)
	}
	return ag.ID, nil
}

// copyMemoryStore makes a dream's create_new output: a new store named
// after the input store holding a copy of its memories, written by the
// caller (api_actor).
func (a *API) copyMemoryStore(c echo.Context, input *db.MemoryStore, dreamID string) (*db.MemoryStore, error) {
	ctx := c.Request().Context()
	suffix := " (dream " + strings.TrimPrefix(dreamID, ids.Dream)[:8] + ")"
	name := input.Name
	if r := []rune(name); len(r)+len([]rune(suffix)) > maxMemoryStoreName {
		name = string(r[:maxMemoryStoreName-len([]rune(suffix))])
	}
	out := &db.MemoryStore{ID: ids.New(ids.MemoryStore), Name: name + suffix, Description: input.Description,
		Metadata: map[string]string{}, CreatedAt: a.now()}
	if err := a.deps.Store.MemoryStoreCreate(ctx, out); err != nil {
		return nil, fmt.Errorf("create the output store of dream %s: %w", dreamID, err)
	}
	p := db.MemoryListParams{StoreID: input.ID, Limit: 100, WithContent: true}
	for {
		items, more, err := a.deps.Store.MemoryList(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			if it.Memory == nil {
				continue
			}
			if _, err := a.deps.Store.MemoryCreate(ctx, out.ID, it.Memory.Path, it.Memory.Content, memoryActor(c), a.now()); err != nil {
				return nil, fmt.Errorf("copy memory %s into the output store %s of dream %s: %w", it.Memory.Path, out.ID, dreamID, err)
			}
			p.After = it.Memory.Path
		}
		if !more || len(items) == 0 {
			return out, nil
		}
	}
}

// startDream stores the dream and creates its session; a session that
// cannot be created fails the dream.
func (a *API) startDream(c echo.Context, id, agentID string, r *dreamRequest, input, output *db.MemoryStore,
	sessions []*db.Session) (*db.Dream, error) {
	ctx := c.Request().Context()
	resources := []map[string]any{{"type": "memory_store", "memory_store_id": output.ID, "access": "read_write",
		"instructions": "The dream's output: reorganise this store."}}
	if output.ID != input.ID {
		resources = append(resources, map[string]any{"type": "memory_store", "memory_store_id": input.ID, "access": "read_only",
			"instructions": "The dream's input store, read-only."})
	}
	raw, err := json.Marshal(resources)
	if err != nil {
		return nil, err
	}
	rcs, err := a.parseResources(ctx, raw, "resources")
	if err != nil {
		return nil, err
	}
	// Fixed mounts, whatever the stores' names: a dream's instructions
	// can name them (docs/api.md).
	mount := dreamOutputMount
	for i := range rcs {
		rcs[i].MountPath = dreamInputMount
		if rcs[i].MemoryStoreID == output.ID {
			rcs[i].MountPath = dreamOutputMount
		}
	}
	text, err := a.dreamMessage(ctx, r, mount, sessions)
	if err != nil {
		return nil, err
	}
	msg, err := json.Marshal(map[string]any{"type": "user.message", "content": []any{map[string]any{"type": "text", "text": text}}})
	if err != nil {
		return nil, err
	}
	initial, err := eventspec.ParseList([]json.RawMessage{msg}, "initial_events", []string{eventspec.UserMessage})
	if err != nil {
		return nil, err
	}
	sid, outID := ids.New(ids.Session), output.ID
	model, _ := json.Marshal(map[string]string{"id": r.ModelID, "speed": "standard"})
	behavior := json.RawMessage(`{"type":"create_new"}`)
	if r.UpdateExisting {
		behavior, _ = json.Marshal(map[string]string{"type": "update_existing", "memory_store_id": input.ID})
	}
	d := &db.Dream{ID: id, InputStoreID: input.ID, InputSessionIDs: r.SessionIDs, Model: model, Instructions: r.Instructions,
		OutputBehavior: behavior, OutputStoreID: &outID, SessionID: &sid, AgentID: &agentID, CreatedAt: a.now()}
	if err := a.deps.Store.DreamCreate(ctx, d); err != nil {
		return nil, err
	}
	_, err = a.createSession(c.Request().Context(), &newSession{ID: sid, Ref: &agentspec.AgentRef{ID: agentID}, EnvironmentID: *sessions[0].EnvironmentID,
		Resources: rcs, Title: "dream " + id, Metadata: map[string]string{"mango.dream_id": id}, Initial: initial, DreamID: &id})
	if err != nil {
		if ferr := a.deps.Store.DreamFail(ctx, id, "session_not_created", fmt.Sprintf("the dream's session could not be created: %v", err), a.now()); ferr != nil {
			return nil, errors.Join(err, ferr)
		}
		return nil, err
	}
	// The session holds the agent's snapshot: the dream's agent is
	// archived at once, so that dreams do not crowd the agents list.
	if _, err := a.deps.Store.AgentArchive(ctx, agentID, a.now()); err != nil {
		a.deps.Logger.WarnContext(ctx, "archive a dream's agent", "dream_id", id, "agent_id", agentID, "err", err)
	}
	return a.deps.Store.DreamGet(ctx, id)
}

// dreamMessage is the text of a dream's first user.message: the
// instructions first (the offline fake model runs directive lines of
// it), then where the output store is mounted, then the transcripts,
// every line quoted with "> " (so none reads as a directive).
func (a *API) dreamMessage(ctx context.Context, r *dreamRequest, mount string, sessions []*db.Session) (string, error) {
	var b strings.Builder
	if r.Instructions != nil {
		b.WriteString(*r.Instructions)
		b.WriteString("\n\n")
	}
	fmt.Fprintf(&b, "Reorganise the memory store mounted at %s from the transcripts below (newest session first).\n", mount)
	budget := maxDreamTranscript
	for _, s := range sessions {
		t, err := a.sessionTranscript(ctx, s.ID)
		if err != nil {
			return "", err
		}
		head := fmt.Sprintf("\n## Session %s (%s)\n", s.ID, s.CreatedAt.UTC().Format("2006-01-02T15:04:05Z"))
		if len(head)+len(t) > budget {
			b.WriteString("\n[older transcripts left out: over the dream's 200 kB transcript bound]\n")
			break
		}
		budget -= len(head) + len(t)
		b.WriteString(head)
		b.WriteString(t)
	}
	return b.String(), nil
}

// sessionTranscript renders a session's user and agent messages as
// quoted text, bounded by maxDreamTranscript.
func (a *API) sessionTranscript(ctx context.Context, sessionID string) (string, error) {
	var b strings.Builder
	p := db.EventListParams{Types: []string{eventspec.UserMessage, "agent.message"}, Limit: 200}
	for {
		evs, more, err := a.deps.Store.EventList(ctx, sessionID, p)
		if err != nil {
			return "", fmt.Errorf("read the transcript of session %s: %w", sessionID, err)
		}
		for _, ev := range evs {
			role := "user"
			if ev.Type != eventspec.UserMessage {
				role = "agent"
			}
			for _, line := range strings.Split(eventText(ev.Body), "\n") {
				fmt.Fprintf(&b, "> %s: %s\n", role, line)
			}
			if b.Len() > maxDreamTranscript {
				return b.String(), nil
			}
			seq := ev.Seq
			p.AfterSeq = &seq
		}
		if !more || len(evs) == 0 {
			return b.String(), nil
		}
	}
}

// eventText is the text blocks of a message event's content.
func eventText(body json.RawMessage) string {
	var m struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	_ = json.Unmarshal(body, &m)
	parts := make([]string, 0, len(m.Content))
	for _, c := range m.Content {
		if c.Type == "text" {
			parts = append(parts, c.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// interruptSession appends a user.interrupt to a session; a session that
// is terminated or gone needs none.
func (a *API) interruptSession(c echo.Context, sessionID string) error {
	events, err := eventspec.ParseSend([]byte(`{"events":[{"type":"user.interrupt"}]}`))
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	req := a.admission(events, a.now())
	_, appended, err := a.deps.Store.Append(ctx, sessionID, req)
	var ae *apierror.Error
	if errors.Is(err, db.ErrNotFound) || errors.Is(err, db.ErrDeleting) || errors.As(err, &ae) {
		return nil
	}
	if err != nil {
		return err
	}
	a.afterAppend(ctx, sessionID, appended, req)
	return nil
}
