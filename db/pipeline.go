package db

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// pipeline runs reads, one sqlc query each, in one round trip instead of
// one each. Every read is called twice: first against a DBTX that only
// queues its statement in a pgx.Batch, then, once the batch is sent,
// against one that hands it the batch's next result. So a read must run
// exactly one statement, the same both times: it cannot depend on another
// read's result. Each statement reads the database as it is when that
// statement runs, as separate statements would.
func (s *Store) pipeline(ctx context.Context, op string, reads ...func(q *dbsqlc.Queries) error) error {
	queue := &batchQueue{}
	for _, read := range reads {
		_ = read(dbsqlc.New(queue)) // errQueued
	}
	if n := len(queue.batch.QueuedQueries); n != len(reads) {
		return fmt.Errorf("%s: %d reads queued %d statements; each must run exactly one", op, len(reads), n)
	}
	br := s.pool.SendBatch(ctx, &queue.batch)
	results := &batchResults{br: br, queued: queue.batch.QueuedQueries}
	var err error
	for _, read := range reads {
		if err = read(dbsqlc.New(results)); err != nil {
			break
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return mapErr(op, err)
}

// errQueued is what a read gets from the queueing pass of a pipeline.
var errQueued = errors.New("statement queued, not run yet")

// batchQueue is the DBTX of a pipeline's first pass: it queues statements.
type batchQueue struct{ batch pgx.Batch }

func (q *batchQueue) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	q.batch.Queue(sql, args...)
	return pgconn.CommandTag{}, errQueued
}

func (q *batchQueue) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	q.batch.Queue(sql, args...)
	return nil, errQueued
}

func (q *batchQueue) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	q.batch.Queue(sql, args...)
	return errRow{errQueued}
}

// batchResults is the DBTX of a pipeline's second pass: each statement
// gets the next result of the sent batch, which must be its own.
type batchResults struct {
	br     pgx.BatchResults
	queued []*pgx.QueuedQuery
	next   int
}

func (r *batchResults) take(sql string) error {
	if r.next >= len(r.queued) || r.queued[r.next].SQL != sql {
		return fmt.Errorf("pipeline: statement %d is not the one queued", r.next)
	}
	r.next++
	return nil
}

func (r *batchResults) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	if err := r.take(sql); err != nil {
		return pgconn.CommandTag{}, err
	}
	return r.br.Exec()
}

func (r *batchResults) Query(_ context.Context, sql string, _ ...any) (pgx.Rows, error) {
	if err := r.take(sql); err != nil {
		return nil, err
	}
	return r.br.Query()
}

func (r *batchResults) QueryRow(_ context.Context, sql string, _ ...any) pgx.Row {
	if err := r.take(sql); err != nil {
		return errRow{err}
	}
	return r.br.QueryRow()
}

var (
	_ dbsqlc.DBTX = (*batchQueue)(nil)
	_ dbsqlc.DBTX = (*batchResults)(nil)
)
