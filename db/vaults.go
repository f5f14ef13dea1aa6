package db

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// Credential authentication types.
const (
	CredentialStaticBearer        = "static_bearer"
	CredentialMCPOAuth            = "mcp_oauth"
	CredentialEnvironmentVariable = "environment_variable"
)

// ErrVaultArchived reports a change to an archived vault or credential.
var ErrVaultArchived = fmt.Errorf("archived: %w", ErrConflict)

// ErrServerTaken reports a credential for an MCP server another live
// credential of the vault already covers.
var ErrServerTaken = fmt.Errorf("another credential of the vault covers this MCP server: %w", ErrConflict)

// Vault is a stored vault: a named set of credentials.
type Vault struct {
	ID          string
	DisplayName string
	Metadata    map[string]string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	ArchivedAt  *time.Time
}

// Credential is a stored credential of a vault. Auth is the non-secret
// part of its authentication settings in their wire form (owned by the
// api-server); its secrets are stored apart, sealed (CredentialSecrets).
type Credential struct {
	ID          string
	VaultID     string
	DisplayName *string
	Metadata    map[string]string
	// AuthType is one of the Credential* types.
	AuthType string
	// MCPServerURL is the MCP server the credential applies to ("" for
	// environment_variable).
	MCPServerURL string
	Auth         json.RawMessage
	CreatedAt    time.Time
	UpdatedAt    time.Time
	ArchivedAt   *time.Time
}

// Secrets maps a credential's secret fields (token, access_token, ...) to
// their sealed values. In an update, a nil value deletes the field.
type Secrets map[string][]byte

// CredentialSecretPurpose is the purpose a credential's secret field is
// sealed for (package envelope): it binds the ciphertext to its row and
// field.
func CredentialSecretPurpose(credentialID, field string) string {
	return "vault_credential/" + credentialID + "/" + field
}

func decodeMetadata(raw json.RawMessage, what, id string) (map[string]string, error) {
	md := map[string]string{}
	if err := json.Unmarshal(raw, &md); err != nil {
		return nil, fmt.Errorf("decode metadata of %s %s: %w", what, id, err)
	}
	return md, nil
}

func vaultFromRow(r dbsqlc.Vault) (*Vault, error) {
	md, err := decodeMetadata(r.Metadata, "vault", r.ID)
	if err != nil {
		return nil, err
	}
	return &Vault{ID: r.ID, DisplayName: r.DisplayName, Metadata: md, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, ArchivedAt: r.ArchivedAt}, nil
}

func credentialFromRow(r dbsqlc.VaultCredential) (*Credential, error) {
	md, err := decodeMetadata(r.Metadata, "credential", r.ID)
	if err != nil {
		return nil, err
	}
	c := &Credential{ID: r.ID, VaultID: r.VaultID, DisplayName: r.DisplayName, Metadata: md, AuthType: r.AuthType, Auth: r.Auth,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, ArchivedAt: r.ArchivedAt}
	if r.McpServerUrl != nil {
		c.MCPServerURL = *r.McpServerUrl
	}
	return c, nil
}

func credentialsFromRows(rows []dbsqlc.VaultCredential) ([]*Credential, error) {
	out := make([]*Credential, 0, len(rows))
	for _, r := range rows {
		c, err := credentialFromRow(r)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// VaultCreate stores a new vault.
func (s *Store) VaultCreate(ctx context.Context, v *Vault) (*Vault, error) {
	var row dbsqlc.Vault
	err := s.withWebhook(ctx, "create vault", v.ID, "vault.created", v.CreatedAt, func(q *dbsqlc.Queries) (err error) {
		row, err = q.VaultInsert(ctx, dbsqlc.VaultInsertParams{ID: v.ID, DisplayName: v.DisplayName, Metadata: metadataJSON(v.Metadata), CreatedAt: v.CreatedAt})
		return err
	})
	if err != nil {
		return nil, err
	}
	return vaultFromRow(row)
}

// VaultGet returns a vault, or ErrNotFound.
func (s *Store) VaultGet(ctx context.Context, id string) (*Vault, error) {
	row, err := s.q.VaultGetByID(ctx, id)
	if err != nil {
		return nil, mapErr("get vault", err)
	}
	return vaultFromRow(row)
}

// VaultsByID returns the vaults of ids that exist, by id.
func (s *Store) VaultsByID(ctx context.Context, ids []string) (map[string]*Vault, error) {
	rows, err := s.q.VaultsByIDs(ctx, ids)
	if err != nil {
		return nil, mapErr("get vaults", err)
	}
	out := make(map[string]*Vault, len(rows))
	for _, r := range rows {
		v, err := vaultFromRow(r)
		if err != nil {
			return nil, err
		}
		out[v.ID] = v
	}
	return out, nil
}

// VaultUpdate locks the vault and stores what next returns (display name,
// metadata, updated_at). An error from next is returned as is.
func (s *Store) VaultUpdate(ctx context.Context, id string, next func(cur *Vault) (*Vault, error)) (*Vault, error) {
	var out *Vault
	err := s.inTx(ctx, "update vault", func(q *dbsqlc.Queries) error {
		row, err := q.VaultGetByIDForUpdate(ctx, id)
		if err != nil {
			return err
		}
		cur, err := vaultFromRow(row)
		if err != nil {
			return err
		}
		n, err := next(cur)
		if err != nil {
			return &decideError{err}
		}
		updated, err := q.VaultUpdate(ctx, dbsqlc.VaultUpdateParams{ID: id, DisplayName: n.DisplayName, Metadata: metadataJSON(n.Metadata), UpdatedAt: n.UpdatedAt})
		if err != nil {
			return err
		}
		out, err = vaultFromRow(updated)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// VaultArchive archives a vault (idempotently) with its live credentials,
// whose secrets it erases: archived credentials are never used again.
func (s *Store) VaultArchive(ctx context.Context, id string, now time.Time) (*Vault, error) {
	var out *Vault
	err := s.withWebhook(ctx, "archive vault", id, "vault.archived", now, func(q *dbsqlc.Queries) error {
		row, err := q.VaultArchive(ctx, dbsqlc.VaultArchiveParams{ID: id, Now: now})
		if err != nil {
			return err
		}
		if err := q.CredentialArchiveOfVault(ctx, dbsqlc.CredentialArchiveOfVaultParams{VaultID: id, ArchivedAt: &now}); err != nil {
			return err
		}
		if err := q.CredentialSecretsDeleteOfVault(ctx, id); err != nil {
			return err
		}
		out, err = vaultFromRow(row)
		return err
	})
	return out, err
}

// VaultDelete removes a vault with its credentials; ErrNotFound when
// absent.
func (s *Store) VaultDelete(ctx context.Context, id string) error {
	return s.withWebhook(ctx, "delete vault", id, "vault.deleted", time.Now(), func(q *dbsqlc.Queries) error {
		n, err := q.VaultDelete(ctx, id)
		if err == nil && n == 0 {
			err = ErrNotFound
		}
		return err
	})
}

// ListParams page a list ordered newest first.
type ListParams struct {
	IncludeArchived bool
	After           *Cursor
	Limit           int
}

func (p ListParams) after() (*time.Time, string) {
	if p.After == nil {
		return nil, ""
	}
	return &p.After.CreatedAt, p.After.ID
}

// VaultList returns vaults newest first, and whether more follow.
func (s *Store) VaultList(ctx context.Context, p ListParams) ([]*Vault, bool, error) {
	arg := dbsqlc.VaultListParams{IncludeArchived: p.IncludeArchived, RowLimit: int32(p.Limit + 1)}
	arg.AfterCreatedAt, arg.AfterID = p.after()
	rows, err := s.q.VaultList(ctx, arg)
	if err != nil {
		return nil, false, mapErr("list vaults", err)
	}
	out := make([]*Vault, 0, len(rows))
	for _, r := range rows {
		v, err := vaultFromRow(r)
		if err != nil {
			return nil, false, err
		}
		out = append(out, v)
	}
	if len(out) > p.Limit {
		return out[:p.Limit], true, nil
	}
	return out, false, nil
}

// CredentialCreate stores a new credential of a live vault with its
// sealed secrets. It returns ErrNotFound for a missing vault,
// ErrVaultArchived and ErrServerTaken.
func (s *Store) CredentialCreate(ctx context.Context, c *Credential, secrets Secrets) (*Credential, error) {
	var out *Credential
	err := s.withWebhook(ctx, "create credential", c.ID, "vault_credential.created", c.CreatedAt, func(q *dbsqlc.Queries) error {
		v, err := q.VaultGetByIDForUpdate(ctx, c.VaultID)
		if err != nil {
			return err
		}
		if v.ArchivedAt != nil {
			return ErrVaultArchived
		}
		row, err := q.CredentialInsert(ctx, dbsqlc.CredentialInsertParams{ID: c.ID, VaultID: c.VaultID, DisplayName: c.DisplayName,
			Metadata: metadataJSON(c.Metadata), AuthType: c.AuthType, McpServerUrl: optString(c.MCPServerURL), Auth: c.Auth, CreatedAt: c.CreatedAt})
		if err != nil {
			if errors.Is(mapErr("", err), ErrConflict) {
				return ErrServerTaken
			}
			return err
		}
		if err := storeSecrets(ctx, q, c.ID, secrets); err != nil {
			return err
		}
		out, err = credentialFromRow(row)
		return err
	})
	return out, err
}

func storeSecrets(ctx context.Context, q *dbsqlc.Queries, credentialID string, secrets Secrets) error {
	for field, sealed := range secrets {
		var err error
		if sealed == nil {
			err = q.CredentialSecretDelete(ctx, dbsqlc.CredentialSecretDeleteParams{CredentialID: credentialID, Field: field})
		} else {
			err = q.CredentialSecretUpsert(ctx, dbsqlc.CredentialSecretUpsertParams{CredentialID: credentialID, Field: field, Sealed: sealed})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// CredentialGet returns a credential of a vault, or ErrNotFound.
func (s *Store) CredentialGet(ctx context.Context, vaultID, id string) (*Credential, error) {
	row, err := s.q.CredentialGet(ctx, dbsqlc.CredentialGetParams{VaultID: vaultID, ID: id})
	if err != nil {
		return nil, mapErr("get credential", err)
	}
	return credentialFromRow(row)
}

// CredentialSecrets returns a credential's sealed secrets by field.
func (s *Store) CredentialSecrets(ctx context.Context, id string) (Secrets, error) {
	rows, err := s.q.CredentialSecretsOf(ctx, id)
	if err != nil {
		return nil, mapErr("get credential secrets", err)
	}
	out := make(Secrets, len(rows))
	for _, r := range rows {
		out[r.Field] = r.Sealed
	}
	return out, nil
}

// CredentialUpdate locks a credential and stores what next returns: its
// display name, metadata, auth and updated_at, and the secret fields to
// set (nil values delete). next sees which secret fields are stored. An
// error from next is returned as is.
func (s *Store) CredentialUpdate(ctx context.Context, vaultID, id string, next func(cur *Credential, stored Secrets) (*Credential, Secrets, error)) (*Credential, error) {
	var out *Credential
	err := s.inTx(ctx, "update credential", func(q *dbsqlc.Queries) error {
		row, err := q.CredentialGetForUpdate(ctx, dbsqlc.CredentialGetForUpdateParams{VaultID: vaultID, ID: id})
		if err != nil {
			return err
		}
		cur, err := credentialFromRow(row)
		if err != nil {
			return err
		}
		rows, err := q.CredentialSecretsOf(ctx, id)
		if err != nil {
			return err
		}
		stored := make(Secrets, len(rows))
		for _, r := range rows {
			stored[r.Field] = r.Sealed
		}
		n, secrets, err := next(cur, stored)
		if err != nil {
			return &decideError{err}
		}
		updated, err := q.CredentialUpdate(ctx, dbsqlc.CredentialUpdateParams{VaultID: vaultID, ID: id, DisplayName: n.DisplayName,
			Metadata: metadataJSON(n.Metadata), Auth: n.Auth, UpdatedAt: n.UpdatedAt})
		if err != nil {
			return err
		}
		if err := storeSecrets(ctx, q, id, secrets); err != nil {
			return err
		}
		out, err = credentialFromRow(updated)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CredentialArchive archives a credential (idempotently) and erases its
// secrets.
func (s *Store) CredentialArchive(ctx context.Context, vaultID, id string, now time.Time) (*Credential, error) {
	var out *Credential
	err := s.withWebhook(ctx, "archive credential", id, "vault_credential.archived", now, func(q *dbsqlc.Queries) error {
		row, err := q.CredentialArchive(ctx, dbsqlc.CredentialArchiveParams{VaultID: vaultID, ID: id, Now: now})
		if err != nil {
			return err
		}
		if err := q.CredentialSecretsDeleteOf(ctx, id); err != nil {
			return err
		}
		out, err = credentialFromRow(row)
		return err
	})
	return out, err
}

// CredentialDelete removes a credential with its secrets; ErrNotFound when
// absent.
func (s *Store) CredentialDelete(ctx context.Context, vaultID, id string) error {
	return s.withWebhook(ctx, "delete credential", id, "vault_credential.deleted", time.Now(), func(q *dbsqlc.Queries) error {
		n, err := q.CredentialDelete(ctx, dbsqlc.CredentialDeleteParams{VaultID: vaultID, ID: id})
		if err == nil && n == 0 {
			err = ErrNotFound
		}
		return err
	})
}

// CredentialList returns a vault's credentials newest first, and whether
// more follow.
func (s *Store) CredentialList(ctx context.Context, vaultID string, p ListParams) ([]*Credential, bool, error) {
	arg := dbsqlc.CredentialListParams{VaultID: vaultID, IncludeArchived: p.IncludeArchived, RowLimit: int32(p.Limit + 1)}
	arg.AfterCreatedAt, arg.AfterID = p.after()
	rows, err := s.q.CredentialList(ctx, arg)
	if err != nil {
		return nil, false, mapErr("list credentials", err)
	}
	out, err := credentialsFromRows(rows)
	if err != nil {
		return nil, false, err
	}
	if len(out) > p.Limit {
		return out[:p.Limit], true, nil
	}
	return out, false, nil
}

// CredentialsOfVaults returns the live credentials of the vaults, oldest
// first.
func (s *Store) CredentialsOfVaults(ctx context.Context, vaultIDs []string) ([]*Credential, error) {
	if len(vaultIDs) == 0 {
		return nil, nil
	}
	rows, err := s.q.CredentialsLiveOfVaults(ctx, vaultIDs)
	if err != nil {
		return nil, mapErr("list credentials", err)
	}
	return credentialsFromRows(rows)
}

// Kinds of sealed secrets.
const (
	SecretResourceToken    = "resource_token"
	SecretCredentialSecret = "credential_secret"
)

// SealedSecret is one stored sealed secret of any kind, for key checks and
// rotation.
type SealedSecret struct {
	// Kind is one of the Secret* kinds.
	Kind string
	// Owner is the row holding it (a resource or credential id) and Field
	// the field (credential secrets).
	Owner  string
	Field  string
	Sealed []byte
}

// Purpose is the purpose the secret is sealed for.
func (s SealedSecret) Purpose() string {
	if s.Kind == SecretResourceToken {
		return ResourceTokenPurpose(s.Owner)
	}
	return CredentialSecretPurpose(s.Owner, s.Field)
}

// String names the secret (never its value), for errors.
func (s SealedSecret) String() string {
	if s.Kind == SecretResourceToken {
		return "the token of resource " + s.Owner
	}
	return "the " + s.Field + " of credential " + s.Owner
}

// SealedSecrets returns every stored sealed secret: resource tokens and
// credential secrets.
func (s *Store) SealedSecrets(ctx context.Context) ([]SealedSecret, error) {
	tokens, err := s.ResourceTokens(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.CredentialSecretsAll(ctx)
	if err != nil {
		return nil, mapErr("list credential secrets", err)
	}
	out := make([]SealedSecret, 0, len(tokens)+len(rows))
	for _, t := range tokens {
		out = append(out, SealedSecret{Kind: SecretResourceToken, Owner: t.ResourceID, Sealed: t.Sealed})
	}
	for _, r := range rows {
		out = append(out, SealedSecret{Kind: SecretCredentialSecret, Owner: r.CredentialID, Field: r.Field, Sealed: r.Sealed})
	}
	return out, nil
}

// RewrapSecret replaces a sealed secret by its re-wrapped form, unless it
// changed meanwhile (then it reports false).
func (s *Store) RewrapSecret(ctx context.Context, sec SealedSecret, rewrapped []byte) (bool, error) {
	if sec.Kind == SecretResourceToken {
		return s.ResourceRewrapToken(ctx, sec.Owner, sec.Sealed, rewrapped)
	}
	n, err := s.q.CredentialRewrapSecret(ctx, dbsqlc.CredentialRewrapSecretParams{CredentialID: sec.Owner, Field: sec.Field,
		OldSealed: sec.Sealed, NewSealed: rewrapped})
	if err != nil {
		return false, mapErr("rewrap credential secret", err)
	}
	return n == 1, nil
}

// CredentialRefreshFailed writes the vault_credential.refresh_failed
// event of a credential whose access token could not be refreshed, once
// per stored state of it (state: its updated_at when the refresh failed):
// retries of a failing refresh notify once, until the credential changes.
func (s *Store) CredentialRefreshFailed(ctx context.Context, credID string, state, now time.Time) error {
	return s.inTx(ctx, "record failed credential refresh", func(q *dbsqlc.Queries) error {
		return emitResourceWebhook(ctx, q, credID, "vault_credential.refresh_failed", strconv.FormatInt(state.UnixNano(), 10), now)
	})
}
