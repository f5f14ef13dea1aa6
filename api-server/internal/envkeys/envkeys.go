// Package envkeys issues, lists and revokes environment keys: the
// credentials of a self-hosted environment's workers (see package auth
// for their form). The admin HTTP routes and the `api-server
// environment-key` command both go through it. A key's secret is returned
// once, by Create; only its SHA-256 is stored.
package envkeys

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/auth"
	"github.com/mangohq/mango/api-server/internal/envspec"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/db"
)

// Limits of a key.
const (
	// MaxNameLen bounds a key's name.
	MaxNameLen = 256
	// MaxExpiresIn bounds a key's lifetime.
	MaxExpiresIn = 10 * 365 * 24 * time.Hour
	// DefaultName names a key created without one.
	DefaultName = "default"
)

// Create issues a key for a self-hosted environment, expiring after
// expiresIn (0: never), and returns it with its secret. Errors a caller
// may show are *apierror.Error.
func Create(ctx context.Context, store *db.Store, environmentID, name string, expiresIn time.Duration, now time.Time) (*db.EnvironmentKey, string, error) {
	if name == "" {
		name = DefaultName
	}
	if len(name) > MaxNameLen {
		return nil, "", apierror.Invalid("name: must be at most %d bytes", MaxNameLen)
	}
	if expiresIn < 0 || expiresIn > MaxExpiresIn {
		return nil, "", apierror.Invalid("expires_in: must be positive and at most %v, got %v", MaxExpiresIn, expiresIn)
	}
	if err := checkSelfHosted(ctx, store, environmentID); err != nil {
		return nil, "", err
	}
	var expiresAt *time.Time
	if expiresIn > 0 {
		t := now.Add(expiresIn)
		expiresAt = &t
	}
	secret, hash := auth.NewEnvironmentKey()
	k, err := store.EnvironmentKeyCreate(ctx, ids.New(ids.EnvKey), environmentID, name, hash, expiresAt, now)
	if errors.Is(err, db.ErrNotFound) {
		return nil, "", notFound(environmentID)
	}
	if err != nil {
		return nil, "", err
	}
	return k, secret, nil
}

// List returns an environment's keys (revoked and expired ones too).
func List(ctx context.Context, store *db.Store, environmentID string) ([]db.EnvironmentKey, error) {
	if !ids.Valid(ids.Environment, environmentID) {
		return nil, notFound(environmentID)
	}
	if _, err := store.EnvironmentGet(ctx, environmentID); err != nil {
		if errors.Is(err, db.ErrNotFound) {
			return nil, notFound(environmentID)
		}
		return nil, err
	}
	return store.EnvironmentKeyList(ctx, environmentID)
}

// Revoke revokes a key: it stops working within the servers' credential
// cache TTL (seconds). Revoking a revoked key changes nothing.
func Revoke(ctx context.Context, store *db.Store, keyID string, now time.Time) (*db.EnvironmentKey, error) {
	if !ids.Valid(ids.EnvKey, keyID) {
		return nil, apierror.NotFoundf("environment key %q not found", keyID)
	}
	k, err := store.EnvironmentKeyRevoke(ctx, keyID, now)
	if errors.Is(err, db.ErrNotFound) {
		return nil, apierror.NotFoundf("environment key %q not found", keyID)
	}
	return k, err
}

func notFound(id string) error { return apierror.NotFoundf("environment %q not found", id) }

// checkSelfHosted refuses keys for environments that are missing or not
// self-hosted: only a self-hosted environment has workers to key.
func checkSelfHosted(ctx context.Context, store *db.Store, environmentID string) error {
	if !ids.Valid(ids.Environment, environmentID) {
		return notFound(environmentID)
	}
	env, err := store.EnvironmentGet(ctx, environmentID)
	if errors.Is(err, db.ErrNotFound) {
		return notFound(environmentID)
	}
	if err != nil {
		return err
	}
	var cfg struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(env.Config, &cfg); err != nil {
		return err
	}
	if cfg.Type != envspec.SelfHosted {
		return apierror.Invalid("environment %q is not self-hosted (its config.type is %q): environment keys are for the workers of a self_hosted environment", environmentID, cfg.Type)
	}
	if env.ArchivedAt != nil {
		return apierror.Invalid("environment %q is archived: it takes no new keys", environmentID)
	}
	return nil
}
