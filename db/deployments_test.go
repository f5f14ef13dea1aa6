package db_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

// TestDeploymentRuns: a scheduled occurrence records one run however
// often it is attempted (a session create and a failure alike); a
// scheduled run's error pauses the deployment with it, in its
// transaction; archiving the agent pauses its active deployments with
// agent_archived_error; each change moves the schedule's version, and a
// sync records it.
func TestDeploymentRuns(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	if _, err := store.AgentCreate(ctx, "agent_dep", json.RawMessage(`{"name":"a","model":{"id":"fake"}}`), nil, t0); err != nil {
		t.Fatal(err)
	}
	mk := func(id string) *db.Deployment {
		d, err := store.DeploymentCreate(ctx, &db.Deployment{ID: id, Name: id, AgentID: "agent_dep", AgentVersion: 1,
			EnvironmentID: "env_x", InitialEvents: json.RawMessage(`[]`), Resources: json.RawMessage(`[]`),
			Schedule: &db.Schedule{Expression: "* * * * *", Timezone: "UTC"}}, t0)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := mk("depl_a")
	if d.Status != db.DeploymentActive || d.ScheduleVersion <= d.ScheduleSynced {
		t.Fatalf("created: %+v; want active and unsynced", d)
	}

	// One occurrence, attempted concurrently: one session, one run.
	at := t0.Add(time.Minute)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			run := &db.DeploymentRun{ID: "drun_" + string(rune('a'+i)), DeploymentID: d.ID, AgentID: "agent_dep", AgentVersion: 1,
				TriggerType: db.TriggerSchedule, ScheduledAt: &at, CreatedAt: at}
			sid := "sesn_dep" + string(rune('a'+i))
			_, _, errs[i] = store.SessionCreate(ctx, db.SessionCreateParams{ID: sid, AgentID: "agent_dep", AgentVersion: 1,
				Agent: json.RawMessage(`{"name":"a"}`), Provider: "local", Metadata: map[string]string{}, Now: at, Run: run}, nil)
		})
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, db.ErrRunExists):
			t.Fatalf("concurrent run of one occurrence: %v", err)
		}
	}
	runs, _, err := store.DeploymentRunList(ctx, db.DeploymentRunListParams{DeploymentID: &d.ID, Limit: 10})
	if err != nil || ok != 1 || len(runs) != 1 || runs[0].SessionID == nil {
		t.Fatalf("one occurrence: %d sessions created, runs %+v, %v", ok, runs, err)
	}
	sess, err := store.SessionGet(ctx, *runs[0].SessionID)
	if err != nil || sess.DeploymentID == nil || *sess.DeploymentID != d.ID {
		t.Fatalf("run's session: %v %+v", err, sess)
	}
	fail := func(id string, at time.Time, pause bool) error {
		typ, msg := "file_not_found_error", "file gone"
		return store.DeploymentRunFail(ctx, &db.DeploymentRun{ID: id, DeploymentID: d.ID, AgentID: "agent_dep", AgentVersion: 1,
			TriggerType: db.TriggerSchedule, ScheduledAt: &at, ErrorType: &typ, ErrorMessage: &msg, CreatedAt: at}, pause)
	}
	if err := fail("drun_dup", at, true); !errors.Is(err, db.ErrRunExists) {
		t.Fatalf("a failure of an occurrence with a run: %v, want ErrRunExists", err)
	}
	if got, _ := store.DeploymentGet(ctx, d.ID); got.Status != db.DeploymentActive || got.LastRunAt == nil || !got.LastRunAt.Equal(at) {
		t.Fatalf("after the refused failure: %+v", got)
	}

	// A failed scheduled run pauses with its error, once.
	at2 := at.Add(time.Minute)
	for range 2 {
		if err := fail("drun_f", at2, true); err != nil && !errors.Is(err, db.ErrRunExists) {
			t.Fatal(err)
		}
	}
	got, err := store.DeploymentGet(ctx, d.ID)
	if err != nil || got.Status != db.DeploymentPaused || pausedBy(got) != "file_not_found_error" ||
		got.ScheduleVersion <= d.ScheduleVersion {
		t.Fatalf("after a failed scheduled run: %v %+v %s", err, got, got.PausedReason)
	}

	// Archiving the agent pauses the active deployments using it.
	b := mk("depl_b")
	if _, err := store.AgentArchive(ctx, "agent_dep", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	gotB, _ := store.DeploymentGet(ctx, b.ID)
	if gotB.Status != db.DeploymentPaused || pausedBy(gotB) != "agent_archived_error" {
		t.Fatalf("deployment of an archived agent: %+v %s", gotB, gotB.PausedReason)
	}
	if again, _ := store.DeploymentGet(ctx, d.ID); pausedBy(again) != "file_not_found_error" {
		t.Errorf("an already paused deployment changed its reason to %s", again.PausedReason)
	}

	// A sync records the version it applied; a second finds nothing to do.
	calls := 0
	for range 2 {
		if err := store.DeploymentSync(ctx, b.ID, func(*db.Deployment) error { calls++; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	unsynced, err := store.DeploymentsUnsynced(ctx, 10)
	if err != nil || calls != 1 || len(unsynced) != 1 || unsynced[0] != d.ID {
		t.Fatalf("syncs applied %d times, unsynced %v (%v); want 1 and only %s", calls, unsynced, err, d.ID)
	}
	if err := store.DeploymentSync(ctx, d.ID, func(*db.Deployment) error { return errors.New("temporal down") }); err == nil {
		t.Fatal("a failed apply reported success")
	}
	if unsynced, _ := store.DeploymentsUnsynced(ctx, 10); len(unsynced) != 1 {
		t.Errorf("after a failed apply: unsynced %v, want %s still", unsynced, d.ID)
	}
}

// pausedBy is the error type of a deployment's error paused_reason.
func pausedBy(d *db.Deployment) string {
	var r struct {
		Type  string `json:"type"`
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	if json.Unmarshal(d.PausedReason, &r) != nil || r.Type != "error" {
		return ""
	}
	return r.Error.Type
}
