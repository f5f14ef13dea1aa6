package app

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/mangohq/mango/api-server/internal/config"
	"github.com/mangohq/mango/api-server/internal/envelope"
	"github.com/mangohq/mango/db"
)

// checkSecrets refuses to start when a stored secret was sealed with a key
// MANGO_VAULT_KEYS does not hold: such a secret could never be used, and
// the operator most likely dropped a key too early. The error names the
// missing key ids (never key material).
func checkSecrets(ctx context.Context, store *db.Store, keys *envelope.Keyring) error {
	secrets, err := store.SealedSecrets(ctx)
	if err != nil {
		return fmt.Errorf("check stored secrets: %w", err)
	}
	missing := map[string]int{}
	for _, sec := range secrets {
		id, err := envelope.KeyID(sec.Sealed)
		if err != nil {
			return fmt.Errorf("check stored secrets: %s: %w", sec, err)
		}
		if !keys.Has(id) {
			missing[id]++
		}
	}
	if len(missing) == 0 {
		return nil
	}
	ids := make([]string, 0, len(missing))
	for id, n := range missing {
		ids = append(ids, fmt.Sprintf("%s (%d secrets)", id, n))
	}
	sort.Strings(ids)
	return fmt.Errorf("%s: stored secrets were sealed with keys it does not list: %s; add those keys back (after the newest key) and run `api-server vault rotate` before removing them",
		envelope.EnvKeys, strings.Join(ids, ", "))
}

// RotateReport is what VaultRotate did.
type RotateReport struct {
	// Rewrapped counts secrets moved under the primary key.
	Rewrapped int
	// Current counts secrets already under it.
	Current int
}

// VaultRotate re-wraps every stored secret's data key (resource tokens and
// credential secrets) under the newest key of MANGO_VAULT_KEYS (the
// first), leaving ciphertexts as they are. Afterwards the older keys can
// be removed. It is safe to run while
// api-servers serve, and to run again.
func VaultRotate(ctx context.Context, cfg *config.Config) (*RotateReport, error) {
	if cfg.Secrets.Empty() {
		return nil, fmt.Errorf("%s: is empty; list the new key first, then the old ones", envelope.EnvKeys)
	}
	pool, err := openPool(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	store := db.NewStore(pool)
	secrets, err := store.SealedSecrets(ctx)
	if err != nil {
		return nil, err
	}
	rep := &RotateReport{}
	for _, sec := range secrets {
		out, changed, err := cfg.Secrets.Rewrap(sec.Sealed, sec.Purpose())
		if err != nil {
			return rep, fmt.Errorf("rewrap %s: %w", sec, err)
		}
		if !changed {
			rep.Current++
			continue
		}
		// A secret replaced meanwhile was sealed under the primary key.
		if _, err := store.RewrapSecret(ctx, sec, out); err != nil {
			return rep, err
		}
		rep.Rewrapped++
	}
	return rep, nil
}
