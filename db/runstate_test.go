package db_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// TestRunState: one read gives a turn its session, environment (nil once
// deleted), pending triggers (queued messages taken up as
// SessionPendingTriggers does), transcript after a position and, when
// asked, its context; a missing session is ErrNotFound.
func TestRunState(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	env := &db.Environment{ID: "env_run", Name: "run", Config: json.RawMessage(`{"type":"cloud"}`), Scope: "organization", CreatedAt: now, UpdatedAt: now}
	if _, err := store.EnvironmentCreate(ctx, env); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.SessionCreate(ctx, db.SessionCreateParams{ID: "sesn_run", AgentID: "agent_1", AgentVersion: 1,
		Agent: json.RawMessage(`{"name":"a"}`), EnvironmentID: &env.ID, Provider: "local", Metadata: map[string]string{}, Now: now}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Append(ctx, "sesn_run", &db.AppendRequest{Now: now,
		Events: []db.NewEvent{
			{ID: "sevt_run1", Type: "user.message", Body: json.RawMessage(`{"content":[]}`), Pending: true},
			{ID: "sevt_run2", Type: "user.message", Body: json.RawMessage(`{"content":[]}`), Queued: true},
		},
		Transcript: []db.TranscriptEntry{{Key: "a", Body: json.RawMessage(`{"n":1}`)}, {Key: "b", Body: json.RawMessage(`{"n":2}`)}},
	}); err != nil {
		t.Fatal(err)
	}

	run, err := store.RunState(ctx, "sesn_run", 0, false, now)
	if err != nil {
		t.Fatal(err)
	}
	var pending []string
	for _, e := range run.Pending {
		pending = append(pending, e.ID)
	}
	if run.Session.ID != "sesn_run" || run.Environment == nil || !strings.Contains(string(run.Environment.Config), `"cloud"`) ||
		strings.Join(pending, " ") != "sevt_run1 sevt_run2" || len(run.Transcript) != 2 || run.Transcript[1].Key != "b" ||
		run.Snapshot != nil || run.Resources != nil {
		t.Fatalf("run state = session %s, environment %+v, pending %v, transcript %+v, snapshot %v, resources %v",
			run.Session.ID, run.Environment, pending, run.Transcript, run.Snapshot, run.Resources)
	}

	// The log's trigger taken, the queued message joins the log.
	if _, err := store.EventsMarkProcessed(ctx, "sesn_run", []string{"sevt_run1"}, now); err != nil {
		t.Fatal(err)
	}
	if err := store.EnvironmentDelete(ctx, env.ID); err != nil {
		t.Fatal(err)
	}
	run, err = store.RunState(ctx, "sesn_run", run.Transcript[0].Seq, true, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if run.Environment != nil || len(run.Pending) != 1 || run.Pending[0].ID != "sevt_run2" || run.Pending[0].Seq != 2 ||
		len(run.Transcript) != 1 || run.Transcript[0].Key != "b" || run.Snapshot != nil || run.Resources == nil || len(run.Resources) != 0 {
		t.Fatalf("run state = environment %+v, pending %+v, transcript %+v, snapshot %v, resources %v; want no environment, sevt_run2 in the log at seq 2, entry b, no snapshot, no resources",
			run.Environment, run.Pending, run.Transcript, run.Snapshot, run.Resources)
	}

	if _, err := store.RunState(ctx, "sesn_missing", 0, true, now); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("run state of a missing session: %v, want ErrNotFound", err)
	}
}

// TestPipelineRefusesAReadWithoutOneStatement: a read that runs no
// statement, or two, would take another's result; the pipeline refuses
// it before sending anything.
func TestPipelineRefusesAReadWithoutOneStatement(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	one := func(q *dbsqlc.Queries) error { return db.SessionGetByID(ctx, q, "sesn_x") }
	none := func(*dbsqlc.Queries) error { return nil }
	two := func(q *dbsqlc.Queries) error { _ = one(q); return one(q) }
	for name, reads := range map[string][]func(*dbsqlc.Queries) error{"none": {one, none}, "two": {two, one}} {
		if err := store.Pipeline(ctx, reads...); err == nil || !strings.Contains(err.Error(), "each must run exactly one") {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
	if err := store.Pipeline(ctx, one, one); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("two reads of a missing session: %v, want ErrNotFound", err)
	}
}
