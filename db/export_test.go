package db

import (
	"context"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// RawTx runs fn as Store methods run their transactions (inTxLast): last
// makes COMMIT go with the next statement. It reports whether the
// connection was left idle, fit for reuse, afterwards.
func (s *Store) RawTx(ctx context.Context, fn func(tx dbsqlc.DBTX, last func()) error) (reusable bool, err error) {
	return s.rawTx(ctx, txOptions{}, fn)
}

// RawTxGenericPlans is RawTx for a transaction that runs generic plans, as
// appends do.
func (s *Store) RawTxGenericPlans(ctx context.Context, fn func(tx dbsqlc.DBTX, last func()) error) (reusable bool, err error) {
	return s.rawTx(ctx, txOptions{genericPlans: true}, fn)
}

func (s *Store) rawTx(ctx context.Context, opts txOptions, fn func(tx dbsqlc.DBTX, last func()) error) (reusable bool, err error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer c.Release()
	defer func() { reusable = !c.Conn().IsClosed() && c.Conn().PgConn().TxStatus() == 'I' }()
	return false, runTx(ctx, c, opts, func(tx *lazyTx) error { return fn(tx, tx.markLast) })
}

// Pipeline runs reads as RunState does: one round trip.
func (s *Store) Pipeline(ctx context.Context, reads ...func(q *dbsqlc.Queries) error) error {
	return s.pipeline(ctx, "test pipeline", reads...)
}

// SessionGetByID is the sqlc query, for reads given to Pipeline.
func SessionGetByID(ctx context.Context, q *dbsqlc.Queries, id string) error {
	_, err := q.SessionGetByID(ctx, id)
	return err
}
