package db

import (
	"context"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// RawTx runs fn as Store methods run their transactions (inTxLast): last
// makes COMMIT go with the next statement. It reports whether the
// connection was left idle, fit for reuse, afterwards.
func (s *Store) RawTx(ctx context.Context, fn func(tx dbsqlc.DBTX, last func()) error) (reusable bool, err error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer c.Release()
	defer func() { reusable = !c.Conn().IsClosed() && c.Conn().PgConn().TxStatus() == 'I' }()
	return false, runTx(ctx, c, func(tx *lazyTx) error { return fn(tx, tx.markLast) })
}
