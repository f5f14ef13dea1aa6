package db_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

// TestVaultCredentialLifecycle: credentials of a vault keep their secrets
// apart; one live credential per MCP server; updates replace and delete
// secret fields; archiving a vault archives its credentials and erases
// their secrets; deleting it removes them.
func TestVaultCredentialLifecycle(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	v, err := store.VaultCreate(ctx, &db.Vault{ID: "vlt_a", DisplayName: "A", Metadata: map[string]string{"k": "v"}, CreatedAt: t0, UpdatedAt: t0})
	if err != nil || v.Metadata["k"] != "v" {
		t.Fatalf("create vault = %+v, %v", v, err)
	}
	cred := &db.Credential{ID: "vcrd_1", VaultID: "vlt_a", AuthType: db.CredentialMCPOAuth, MCPServerURL: "https://mcp.example.com/mcp",
		Auth: json.RawMessage(`{"type":"mcp_oauth"}`), CreatedAt: t0, UpdatedAt: t0}
	if _, err := store.CredentialCreate(ctx, cred, db.Secrets{"access_token": []byte("s1"), "refresh_token": []byte("s2")}); err != nil {
		t.Fatal(err)
	}
	dup := *cred
	dup.ID = "vcrd_2"
	if _, err := store.CredentialCreate(ctx, &dup, db.Secrets{"access_token": []byte("s3")}); !errors.Is(err, db.ErrServerTaken) {
		t.Fatalf("second credential for the same server: err = %v; want ErrServerTaken", err)
	}
	missing := dup
	missing.VaultID = "vlt_missing"
	if _, err := store.CredentialCreate(ctx, &missing, nil); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("credential of a missing vault: err = %v; want ErrNotFound", err)
	}
	_, err = store.CredentialUpdate(ctx, "vlt_a", "vcrd_1", func(cur *db.Credential, stored db.Secrets) (*db.Credential, db.Secrets, error) {
		if !bytes.Equal(stored["refresh_token"], []byte("s2")) {
			t.Errorf("stored secrets seen by update = %q; want the refresh token", stored)
		}
		n := *cur
		n.UpdatedAt = t0.Add(time.Second)
		return &n, db.Secrets{"access_token": []byte("s1b"), "refresh_token": nil}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := store.CredentialSecrets(ctx, "vcrd_1")
	if err != nil || len(secrets) != 1 || string(secrets["access_token"]) != "s1b" {
		t.Fatalf("secrets after update = %q, %v; want only the new access token", secrets, err)
	}
	all, err := store.SealedSecrets(ctx)
	if err != nil || len(all) != 1 || all[0].Purpose() != db.CredentialSecretPurpose("vcrd_1", "access_token") {
		t.Fatalf("sealed secrets = %+v, %v; want the access token of vcrd_1", all, err)
	}
	if ok, err := store.RewrapSecret(ctx, all[0], []byte("rewrapped")); err != nil || !ok {
		t.Fatalf("rewrap = %v, %v", ok, err)
	}
	if ok, err := store.RewrapSecret(ctx, all[0], []byte("stale")); err != nil || ok {
		t.Fatalf("rewrap of a changed secret = %v, %v; want false", ok, err)
	}

	// A session records its vaults in order.
	_, _, err = store.SessionCreate(ctx, db.SessionCreateParams{ID: "sesn_v", AgentID: "agent_1", AgentVersion: 1,
		Agent: json.RawMessage(`{}`), Provider: "local", Metadata: map[string]string{}, Now: t0, VaultIDs: []string{"vlt_a", "vlt_b"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.SessionGet(ctx, "sesn_v")
	if err != nil || !slices.Equal(s.VaultIDs, []string{"vlt_a", "vlt_b"}) {
		t.Fatalf("session vault ids = %v, %v; want [vlt_a vlt_b]", s.VaultIDs, err)
	}
	s, err = store.SessionUpdate(ctx, "sesn_v", t0, func(cur *db.Session) (*db.Session, error) {
		n := *cur
		n.VaultIDs = []string{"vlt_b"}
		return &n, nil
	})
	if err != nil || !slices.Equal(s.VaultIDs, []string{"vlt_b"}) {
		t.Fatalf("updated vault ids = %v, %v; want [vlt_b]", s.VaultIDs, err)
	}

	// Archiving the vault archives the credential and erases its secrets.
	if _, err := store.VaultArchive(ctx, "vlt_a", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	c, err := store.CredentialGet(ctx, "vlt_a", "vcrd_1")
	if err != nil || c.ArchivedAt == nil {
		t.Fatalf("credential after vault archive = %+v, %v; want archived", c, err)
	}
	if secrets, _ := store.CredentialSecrets(ctx, "vcrd_1"); len(secrets) != 0 {
		t.Fatalf("secrets after archive = %d fields; want none", len(secrets))
	}
	if _, err := store.CredentialCreate(ctx, &dup, nil); !errors.Is(err, db.ErrVaultArchived) {
		t.Fatalf("credential of an archived vault: err = %v; want ErrVaultArchived", err)
	}
	if err := store.VaultDelete(ctx, "vlt_a"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.CredentialGet(ctx, "vlt_a", "vcrd_1"); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("credential after vault delete: err = %v; want ErrNotFound", err)
	}
}
