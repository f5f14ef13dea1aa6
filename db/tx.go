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
// round trip fewer per transaction, a quarter of an append's.
func (s *Store) inTx(ctx context.Context, op string, fn func(q *dbsqlc.Queries) error) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return mapErr(op, err)
	}
	defer c.Release()
	return mapErr(op, runTx(ctx, c, func(tx dbsqlc.DBTX) error { return fn(dbsqlc.New(tx)) }))
}

// runTx runs fn in a transaction on c: rolled back when fn fails or
// panics, committed when it returns nil. A connection left inside a
// transaction (its rollback or commit failed) is destroyed by the pool on
// release, never reused.
func runTx(ctx context.Context, c *pgxpool.Conn, fn func(tx dbsqlc.DBTX) error) error {
	tx := &lazyTx{conn: c.Conn()}
	settled := false
	defer func() {
		if tx.begun && !settled {
			_, _ = tx.conn.Exec(ctx, "rollback")
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	settled = true
	if !tx.begun {
		return nil // fn ran no statement
	}
	tag, err := tx.conn.Exec(ctx, "commit")
	if err != nil {
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback // a statement failed and fn went on
	}
	return nil
}

// lazyTx is a dbsqlc.DBTX for one transaction on one connection whose
// BEGIN is sent with its first statement, in one pgx.Batch (one round
// trip), instead of in a round trip of its own as pgx.Tx does.
type lazyTx struct {
	conn  *pgx.Conn
	begun bool
}

var _ dbsqlc.DBTX = (*lazyTx)(nil)

// begin sends BEGIN and the first statement; the caller reads the
// statement's result from the returned results and closes them.
func (t *lazyTx) begin(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	t.begun = true
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue(sql, args...)
	br := t.conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	return br, nil
}

// Exec implements dbsqlc.DBTX.
func (t *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.begun {
		return t.conn.Exec(ctx, sql, args...)
	}
	br, err := t.begin(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// Query implements dbsqlc.DBTX.
func (t *lazyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.begun {
		return t.conn.Query(ctx, sql, args...)
	}
	br, err := t.begin(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// QueryRow implements dbsqlc.DBTX.
func (t *lazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.begun {
		return t.conn.QueryRow(ctx, sql, args...)
	}
	br, err := t.begin(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return batchRow{br}
}

// batchRows are the rows of a transaction's first statement: closing them
// closes the batch that carried it.
type batchRows struct {
	pgx.Rows
	br pgx.BatchResults
}

func (r *batchRows) Close() {
	r.Rows.Close()
	_ = r.br.Close()
}

// batchRow is the row of a transaction's first statement.
type batchRow struct{ br pgx.BatchResults }

func (r batchRow) Scan(dest ...any) error {
	err := r.br.QueryRow().Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

// errRow is a row whose statement could not be sent.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
