package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/mangohq/mango/api-server/internal/config"
	"github.com/mangohq/mango/api-server/internal/envkeys"
	"github.com/mangohq/mango/db"
)

// EnvironmentKeyUsage is the usage of `api-server environment-key`.
const EnvironmentKeyUsage = `usage:
  api-server environment-key create --environment ID [--name NAME] [--expires-in DURATION]
  api-server environment-key list --environment ID
  api-server environment-key revoke KEY_ID`

// EnvironmentKeyArgs is a parsed `api-server environment-key` command.
type EnvironmentKeyArgs struct {
	// Action is create, list or revoke.
	Action string
	// EnvironmentID is the environment of create and list.
	EnvironmentID string
	// Name names the key to create.
	Name string
	// ExpiresIn is the lifetime of the key to create (0: no expiry).
	ExpiresIn time.Duration
	// KeyID is the key to revoke.
	KeyID string
}

// ParseEnvironmentKeyArgs parses the arguments after `environment-key`.
func ParseEnvironmentKeyArgs(args []string) (*EnvironmentKeyArgs, error) {
	if len(args) == 0 {
		return nil, errors.New(EnvironmentKeyUsage)
	}
	out := &EnvironmentKeyArgs{Action: args[0]}
	fs := flag.NewFlagSet("environment-key "+args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	switch args[0] {
	case "create":
		fs.StringVar(&out.EnvironmentID, "environment", "", "environment id")
		fs.StringVar(&out.Name, "name", "", "key name")
		fs.DurationVar(&out.ExpiresIn, "expires-in", 0, "lifetime")
	case "list":
		fs.StringVar(&out.EnvironmentID, "environment", "", "environment id")
	case "revoke":
	default:
		return nil, fmt.Errorf("unknown action %q\n%s", args[0], EnvironmentKeyUsage)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, EnvironmentKeyUsage)
	}
	rest := fs.Args()
	switch {
	case out.Action == "revoke" && len(rest) == 1:
		out.KeyID = rest[0]
	case out.Action == "revoke":
		return nil, fmt.Errorf("revoke takes one key id\n%s", EnvironmentKeyUsage)
	case len(rest) > 0:
		return nil, fmt.Errorf("unexpected arguments %q\n%s", rest, EnvironmentKeyUsage)
	case out.EnvironmentID == "":
		return nil, fmt.Errorf("--environment is required\n%s", EnvironmentKeyUsage)
	case out.ExpiresIn < 0:
		return nil, fmt.Errorf("--expires-in must be positive, got %v", out.ExpiresIn)
	}
	return out, nil
}

// EnvironmentKey runs `api-server environment-key` against the database
// of cfg, writing its result to out. The secret of a created key is
// printed once and never again.
func EnvironmentKey(ctx context.Context, cfg *config.Config, args *EnvironmentKeyArgs, out io.Writer) error {
	pool, err := openPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := db.NewStore(pool)
	now := time.Now().UTC().Truncate(time.Microsecond)
	switch args.Action {
	case "create":
		k, secret, err := envkeys.Create(ctx, store, args.EnvironmentID, args.Name, args.ExpiresIn, now)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "environment key %s (%q) for %s%s\n%s\nThe key is shown only now: store it in the worker's ANTHROPIC_ENVIRONMENT_KEY.\n",
			k.ID, k.Name, k.EnvironmentID, expiry(k), secret)
		return err
	case "list":
		keys, err := envkeys.List(ctx, store, args.EnvironmentID)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		_, _ = fmt.Fprintln(w, "ID\tNAME\tCREATED\tEXPIRES\tREVOKED\tLAST USED")
		for _, k := range keys {
			_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.CreatedAt.Format(time.RFC3339), orDash(k.ExpiresAt), orDash(k.RevokedAt), orDash(k.LastUsedAt))
		}
		return w.Flush() // reports a failed write of the lines above
	default: // revoke
		k, err := envkeys.Revoke(ctx, store, args.KeyID, now)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "environment key %s revoked at %s\n", k.ID, k.RevokedAt.Format(time.RFC3339))
		return err
	}
}

func expiry(k *db.EnvironmentKey) string {
	if k.ExpiresAt == nil {
		return ", no expiry"
	}
	return ", expires " + k.ExpiresAt.Format(time.RFC3339)
}

func orDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}
