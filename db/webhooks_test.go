package db_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

// TestWebhookDeliveries: a change writes one delivery per enabled endpoint
// subscribed to its type, in its transaction, and a retried change none
// more; a disabled endpoint gets nothing; a claim leases a delivery from
// other claims; an attempt given up disables its endpoint.
func TestWebhookDeliveries(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	mk := func(id string, events ...string) *db.WebhookEndpoint {
		e, err := store.WebhookEndpointCreate(ctx, &db.WebhookEndpoint{ID: id, URL: "https://example.com/" + id, EnabledEvents: events,
			SecretSealed: []byte("sealed")}, t0)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	mk("whep_all", "session.created", "session.status_run_started", "session.status_idled", "session.idled")
	mk("whep_idle", "session.status_idled")
	off := mk("whep_off", "session.created", "session.status_idled")
	off.State = "disabled"
	if _, err := store.WebhookEndpointUpdate(ctx, off, t0); err != nil {
		t.Fatal(err)
	}
	sid := "sesn_hook0000000000000000001"
	if _, _, err := store.SessionCreate(ctx, db.SessionCreateParams{ID: sid, AgentID: "agent_a", AgentVersion: 1,
		Agent: json.RawMessage(`{"name":"a"}`), Provider: "local", Metadata: map[string]string{}, Now: t0}, nil); err != nil {
		t.Fatal(err)
	}
	running(t, store, sid, t0.Add(time.Second))
	for range 2 { // the turn's end, and a retry of it
		turnEnd(t, store, sid, "turn1", t0.Add(2*time.Second), nil)
	}
	byEndpoint := func(id string) []string {
		ds, err := store.WebhookDeliveries(ctx, id, 100)
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, d := range ds {
			types = append(types, d.EventType)
		}
		slices.Sort(types)
		return types
	}
	if got := byEndpoint("whep_all"); !slices.Equal(got, []string{"session.created", "session.idled", "session.status_idled", "session.status_run_started"}) {
		t.Errorf("deliveries of the endpoint subscribed to all: %v", got)
	}
	if got := byEndpoint("whep_idle"); !slices.Equal(got, []string{"session.status_idled"}) {
		t.Errorf("deliveries of the idle endpoint: %v", got)
	}
	if got := byEndpoint("whep_off"); len(got) != 0 {
		t.Errorf("a disabled endpoint got %v", got)
	}
	// Two claims at once share nothing; the leases hold until they end.
	now := t0.Add(3 * time.Second)
	a, err := store.WebhookClaimDue(ctx, now, 3, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	b, err := store.WebhookClaimDue(ctx, now, 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 3 || len(b) != 2 {
		t.Fatalf("claims of 3 then 10: %d and %d deliveries, want 3 and the 2 left", len(a), len(b))
	}
	for _, d := range a {
		if slices.ContainsFunc(b, func(o db.WebhookDue) bool { return o.EventID == d.EventID && o.EndpointID == d.EndpointID }) {
			t.Fatalf("delivery %s/%s claimed twice", d.EventID, d.EndpointID)
		}
	}
	if c, _ := store.WebhookClaimDue(ctx, now.Add(30*time.Second), 10, time.Minute); len(c) != 0 {
		t.Fatalf("a claim under the leases got %d deliveries", len(c))
	}
	// One delivered, one given up: its endpoint is disabled, saying why.
	d := a[0]
	if err := store.WebhookRecord(ctx, db.WebhookAttempt{EventID: d.EventID, EndpointID: d.EndpointID, At: now, StatusCode: 204, Delivered: true}); err != nil {
		t.Fatal(err)
	}
	g := b[0]
	if err := store.WebhookRecord(ctx, db.WebhookAttempt{EventID: g.EventID, EndpointID: g.EndpointID, At: now, StatusCode: 500, Error: "HTTP 500",
		GaveUp: true, DisableReason: "deliveries failed for 24h"}); err != nil {
		t.Fatal(err)
	}
	ep, err := store.WebhookEndpointGet(ctx, g.EndpointID)
	if err != nil || ep.State != "disabled" || ep.DisabledReason != "deliveries failed for 24h" {
		t.Fatalf("endpoint after a delivery gave up: %+v (%v)", ep, err)
	}
}

// TestResourceWebhooks: the changes of agents, environments and vaults
// write their events, once each however often a change is repeated.
func TestResourceWebhooks(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 7, 2, 0, 0, 0, 0, time.UTC)
	if _, err := store.WebhookEndpointCreate(ctx, &db.WebhookEndpoint{ID: "whep_res", URL: "https://example.com/h",
		EnabledEvents: []string{"agent.created", "agent.archived", "environment.created", "environment.deleted", "vault.created",
			"vault.archived", "vault.deleted"}, SecretSealed: []byte("s")}, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := store.AgentCreate(ctx, "agent_res", json.RawMessage(`{"name":"a"}`), nil, t0); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := store.AgentArchive(ctx, "agent_res", t0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.EnvironmentCreate(ctx, &db.Environment{ID: "env_res", Name: "res", Config: json.RawMessage(`{}`),
		Metadata: map[string]string{}, CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := store.EnvironmentDelete(ctx, "env_res"); err != nil {
		t.Fatal(err)
	}
	if err := store.EnvironmentDelete(ctx, "env_res"); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("deleting a deleted environment: %v, want ErrNotFound", err)
	}
	if _, err := store.VaultCreate(ctx, &db.Vault{ID: "vlt_res", DisplayName: "v", Metadata: map[string]string{}, CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := store.VaultArchive(ctx, "vlt_res", t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.VaultDelete(ctx, "vlt_res"); err != nil {
		t.Fatal(err)
	}
	ds, err := store.WebhookDeliveries(ctx, "whep_res", 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range ds {
		got = append(got, d.EventType+" "+d.ResourceID)
	}
	slices.Sort(got)
	want := []string{"agent.archived agent_res", "agent.created agent_res", "environment.created env_res", "environment.deleted env_res",
		"vault.archived vlt_res", "vault.created vlt_res", "vault.deleted vlt_res"}
	if !slices.Equal(got, want) {
		t.Fatalf("deliveries %v, want %v", got, want)
	}
}

// TestWebhookStats: the pending deliveries to enabled endpoints are
// counted with the age of the oldest one's event; a disabled endpoint's
// and a delivered one are not.
func TestWebhookStats(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	check := func(at time.Time, pending int64, age time.Duration) {
		t.Helper()
		st, err := store.WebhookStats(ctx, at)
		if err != nil || st.Pending != pending || st.OldestAge != age {
			t.Fatalf("WebhookStats(%v) = %+v, %v; want %d pending, oldest %v", at, st, err, pending, age)
		}
	}
	check(t0, 0, 0)
	ep, err := store.WebhookEndpointCreate(ctx, &db.WebhookEndpoint{ID: "whep_stats", URL: "https://example.com/h",
		EnabledEvents: []string{"session.created"}, SecretSealed: []byte("sealed")}, t0)
	if err != nil {
		t.Fatal(err)
	}
	for i, at := range []time.Time{t0, t0.Add(time.Minute)} {
		if _, _, err := store.SessionCreate(ctx, db.SessionCreateParams{ID: fmt.Sprintf("sesn_stats%d", i), AgentID: "agent_a", AgentVersion: 1,
			Agent: json.RawMessage(`{"name":"a"}`), Provider: "local", Metadata: map[string]string{}, Now: at}, nil); err != nil {
			t.Fatal(err)
		}
	}
	check(t0.Add(90*time.Second), 2, 90*time.Second)

	ep.State = "disabled"
	if _, err := store.WebhookEndpointUpdate(ctx, ep, t0); err != nil {
		t.Fatal(err)
	}
	check(t0.Add(90*time.Second), 0, 0)
	ep.State = "enabled"
	if _, err := store.WebhookEndpointUpdate(ctx, ep, t0); err != nil {
		t.Fatal(err)
	}
	due, err := store.WebhookClaimDue(ctx, t0.Add(2*time.Minute), 1, time.Minute)
	if err != nil || len(due) != 1 {
		t.Fatalf("WebhookClaimDue = %+v, %v; want the oldest delivery", due, err)
	}
	if err := store.WebhookRecord(ctx, db.WebhookAttempt{EventID: due[0].EventID, EndpointID: due[0].EndpointID, At: t0.Add(2 * time.Minute),
		StatusCode: 204, Delivered: true}); err != nil {
		t.Fatal(err)
	}
	check(t0.Add(2*time.Minute), 1, time.Minute)
}
