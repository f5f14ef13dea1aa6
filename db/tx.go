package db

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// inTx runs fn in a transaction, committing when it returns nil. The
// transaction's BEGIN travels with its first statement (see lazyTx): one
// round trip fewer per transaction.
func (s *Store) inTx(ctx context.Context, op string, fn func(q *dbsqlc.Queries) error) error {
	return s.inTxLast(ctx, op, txOptions{}, func(q *dbsqlc.Queries, _ func()) error { return fn(q) })
}

// txOptions tune a transaction.
type txOptions struct {
	// genericPlans makes its statements run generic plans, for a statement
	// PostgreSQL would otherwise plan again at most executions (measured:
	// EventsAppend, 1 ms of planning for 0.8 ms of execution). Set with
	// BEGIN, in the same round trip.
	genericPlans bool
}

// inTxLast is inTx, with options, for a fn that can tell its last
// statement: called just before that statement (an Exec or a QueryRow),
// last makes COMMIT travel with it, one round trip fewer again. fn must
// run no statement after it.
func (s *Store) inTxLast(ctx context.Context, op string, opts txOptions, fn func(q *dbsqlc.Queries, last func()) error) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return mapErr(op, err)
	}
	defer c.Release()
	return mapErr(op, runTx(ctx, c, opts, func(tx *lazyTx) error { return fn(dbsqlc.New(tx), tx.markLast) }))
}

// runTx runs fn in a transaction on c: rolled back when fn fails or
// panics, committed when it returns nil. A connection left inside a
// transaction (its rollback or commit failed) is destroyed by the pool on
// release, never reused.
func runTx(ctx context.Context, c *pgxpool.Conn, opts txOptions, fn func(tx *lazyTx) error) error {
	tx := &lazyTx{conn: c.Conn(), opts: opts}
	settled := false
	defer func() {
		if tx.begun && !tx.ended && !settled {
			_, _ = tx.conn.Exec(ctx, "rollback")
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	settled = true
	if !tx.begun || tx.ended {
		return nil // fn ran no statement, or COMMIT went with its last
	}
	return commitResult(tx.conn.Exec(ctx, "commit"))
}

// commitResult is the outcome of a COMMIT: pgx.ErrTxCommitRollback when
// the transaction had failed (a statement failed and fn went on).
func commitResult(tag pgconn.CommandTag, err error) error {
	if err == nil && tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return err
}

// lazyTx is a dbsqlc.DBTX for one transaction on one connection: BEGIN is
// sent in one pgx.Batch with the first statement, not in a round trip of
// its own as pgx.Tx does, and COMMIT with the statement marked last
// (commitNext).
type lazyTx struct {
	conn  *pgx.Conn
	opts  txOptions
	begun bool
	// commitNext: COMMIT goes with the next Exec or QueryRow.
	commitNext bool
	// ended: a COMMIT sent with a statement ran (committed, or rolled
	// back a failed transaction); runTx sends neither.
	ended bool
}

var _ dbsqlc.DBTX = (*lazyTx)(nil)

// markLast makes COMMIT go with the next Exec or QueryRow, the
// transaction's last statement.
func (t *lazyTx) markLast() { t.commitNext = true }

// alone reports whether a statement goes on its own, with nothing to
// batch it with.
func (t *lazyTx) alone() bool { return t.begun && !t.commitNext }

// send sends a statement with BEGIN before it when it is the first, and
// COMMIT after it when commit is set. The caller reads the statement's
// result from br, then calls finish, which reads the COMMIT's and closes
// the batch. A statement that fails leaves the COMMIT unrun: the
// transaction stays open for runTx to roll back.
func (t *lazyTx) send(ctx context.Context, sql string, args []any, commit bool) (br pgx.BatchResults, finish func() error, err error) {
	b := &pgx.Batch{}
	begin := !t.begun
	t.begun, t.commitNext = true, false
	if begin {
		b.Queue("begin")
		if t.opts.genericPlans {
			b.Queue("set local plan_cache_mode = force_generic_plan")
		}
	}
	b.Queue(sql, args...)
	if commit {
		b.Queue("commit")
	}
	br = t.conn.SendBatch(ctx, b)
	finish = func() error {
		var err error
		if commit {
			var tag pgconn.CommandTag
			if tag, err = br.Exec(); err == nil {
				t.ended = true
				err = commitResult(tag, nil)
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return err
	}
	if begin {
		_, err := br.Exec()
		if err == nil && t.opts.genericPlans {
			_, err = br.Exec()
		}
		if err != nil {
			_ = br.Close()
			return nil, nil, err
		}
	}
	return br, finish, nil
}

// Exec implements dbsqlc.DBTX.
func (t *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.alone() {
		return t.conn.Exec(ctx, sql, args...)
	}
	br, finish, err := t.send(ctx, sql, args, t.commitNext)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if ferr := finish(); err == nil {
		err = ferr
	}
	return tag, err
}

// Query implements dbsqlc.DBTX. COMMIT never goes with a Query (its
// result would come after the caller's last look at the rows' error):
// runTx sends it.
func (t *lazyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.begun {
		t.commitNext = false
		return t.conn.Query(ctx, sql, args...)
	}
	br, finish, err := t.send(ctx, sql, args, false)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = finish()
		return nil, err
	}
	return &batchRows{Rows: rows, finish: finish}, nil
}

// QueryRow implements dbsqlc.DBTX.
func (t *lazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.alone() {
		return t.conn.QueryRow(ctx, sql, args...)
	}
	br, finish, err := t.send(ctx, sql, args, t.commitNext)
	if err != nil {
		return errRow{err}
	}
	return batchRow{br: br, finish: finish}
}

// batchRows are the rows of a transaction's first statement: closing them
// closes the batch that carried it.
type batchRows struct {
	pgx.Rows
	finish func() error
}

func (r *batchRows) Close() {
	r.Rows.Close()
	_ = r.finish()
}

// batchRow is the row of a statement sent in a batch.
type batchRow struct {
	br     pgx.BatchResults
	finish func() error
}

func (r batchRow) Scan(dest ...any) error {
	err := r.br.QueryRow().Scan(dest...)
	if ferr := r.finish(); err == nil {
		err = ferr
	}
	return err
}

// errRow is a row whose statement could not be sent.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
