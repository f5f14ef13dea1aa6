package db_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// TestTransactions: a Store transaction, whose BEGIN rides with its first
// statement (and COMMIT with the one marked last), commits what its
// statements did when fn succeeds, rolls all of it back when fn fails or
// panics or its last statement fails (whatever its first statement was:
// Exec, Query or QueryRow), keeps its row locks until it ends, and leaves
// its connection idle for reuse.
func TestTransactions(t *testing.T) {
	t.Parallel()
	p := &txProbe{store: dbtest.Store(t), ctx: context.Background()}
	if _, err := p.store.Pool().Exec(p.ctx, `CREATE TABLE tx_probe (k text PRIMARY KEY, v int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for name, stmt := range p.firstStatements() {
		for _, outcome := range []string{"fails", "panics", "commits", "commits with its last", "fails in its last"} {
			p.checkOutcome(t, name, stmt, outcome)
		}
	}
	p.checkFailingFirst(t)
	p.checkFailedStatementRollsBack(t)
	p.checkRowLockHeld(t)
}

// txProbe is the table tx_probe that TestTransactions's transactions write.
type txProbe struct {
	store *db.Store
	ctx   context.Context
}

// errTxFn is what fn returns when it fails.
var errTxFn = errors.New("fn failed")

// rows is how many rows tx_probe holds.
func (p *txProbe) rows(t *testing.T) int {
	t.Helper()
	var n int
	if err := p.store.Pool().QueryRow(p.ctx, `SELECT count(*) FROM tx_probe`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// firstStatements are the ways a transaction's first statement inserts
// the row 'a', by name.
func (p *txProbe) firstStatements() map[string]func(tx dbsqlc.DBTX) error {
	ctx := p.ctx
	return map[string]func(tx dbsqlc.DBTX) error{
		"exec": func(tx dbsqlc.DBTX) error {
			_, err := tx.Exec(ctx, `INSERT INTO tx_probe VALUES ('a', 1)`)
			return err
		},
		"query": func(tx dbsqlc.DBTX) error {
			r, err := tx.Query(ctx, `INSERT INTO tx_probe VALUES ('a', 1) RETURNING v`)
			if err != nil {
				return err
			}
			defer r.Close()
			for r.Next() {
			}
			return r.Err()
		},
		"query row": func(tx dbsqlc.DBTX) error {
			var v int
			return tx.QueryRow(ctx, `INSERT INTO tx_probe VALUES ('a', 1) RETURNING v`).Scan(&v)
		},
	}
}

// checkOutcome runs, on an empty tx_probe, a transaction whose first
// statement is stmt and whose fn ends as outcome says, and checks the rows
// it left, its error and that its connection can be reused.
func (p *txProbe) checkOutcome(t *testing.T, name string, stmt func(tx dbsqlc.DBTX) error, outcome string) {
	t.Helper()
	ctx := p.ctx
	if _, err := p.store.Pool().Exec(ctx, `DELETE FROM tx_probe`); err != nil {
		t.Fatal(err)
	}
	var reusable bool
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil && outcome != "panics" {
				t.Fatalf("%s, %s: panic %v", name, outcome, r)
			}
		}()
		reusable, err = p.store.RawTx(ctx, func(tx dbsqlc.DBTX, last func()) error {
			if err := stmt(tx); err != nil {
				return err
			}
			second := `INSERT INTO tx_probe VALUES ('b', 2)`
			switch outcome {
			case "commits with its last":
				last()
			case "fails in its last":
				last()
				second = `INSERT INTO tx_probe VALUES ('a', 2)` // the key is taken
			}
			if _, err := tx.Exec(ctx, second); err != nil {
				return err
			}
			switch outcome {
			case "fails":
				return errTxFn
			case "panics":
				panic("fn panicked")
			}
			return nil
		})
	}()
	want := 0
	if strings.HasPrefix(outcome, "commits") {
		want = 2
	}
	if got := p.rows(t); got != want {
		t.Errorf("first statement %s, fn %s: %d rows after, want %d", name, outcome, got, want)
	}
	if outcome == "fails" && !errors.Is(err, errTxFn) {
		t.Errorf("first statement %s, fn fails: err %v, want fn's", name, err)
	}
	if outcome != "panics" {
		wantErr := !strings.HasPrefix(outcome, "commits")
		if (err != nil) != wantErr || !reusable {
			t.Errorf("first statement %s, fn %s: err %v, connection reusable %v; want an error %v, reusable", name, outcome, err, reusable, wantErr)
		}
	}
}

// checkFailingFirst: a failing first statement fails the transaction;
// nothing stays.
func (p *txProbe) checkFailingFirst(t *testing.T) {
	t.Helper()
	reusable, err := p.store.RawTx(p.ctx, func(tx dbsqlc.DBTX, _ func()) error {
		var v int
		return tx.QueryRow(p.ctx, `SELECT v FROM tx_probe_missing`).Scan(&v)
	})
	if err == nil || !reusable {
		t.Errorf("a failing first statement: err %v, reusable %v; want an error and a reusable connection", err, reusable)
	}
}

// checkFailedStatementRollsBack: a statement that failed inside fn, which
// went on regardless, makes the commit a rollback: reported, not silent.
// It leaves tx_probe holding ('a', 1) and ('b', 2).
func (p *txProbe) checkFailedStatementRollsBack(t *testing.T) {
	t.Helper()
	ctx := p.ctx
	if _, err := p.store.Pool().Exec(ctx, `DELETE FROM tx_probe; INSERT INTO tx_probe VALUES ('a', 1), ('b', 2)`); err != nil {
		t.Fatal(err)
	}
	_, err := p.store.RawTx(ctx, func(tx dbsqlc.DBTX, _ func()) error {
		_, _ = tx.Exec(ctx, `INSERT INTO tx_probe VALUES ('c', 3)`)
		_, _ = tx.Exec(ctx, `INSERT INTO tx_probe VALUES ('c', 3)`)
		return nil
	})
	if err == nil || p.rows(t) != 2 {
		t.Errorf("commit after a failed statement: err %v, %d rows; want an error and the 2 rows from before", err, p.rows(t))
	}
}

// checkRowLockHeld: the row lock taken by the first statement holds until
// the end. Row 'a' must hold v = 1 before.
func (p *txProbe) checkRowLockHeld(t *testing.T) {
	t.Helper()
	ctx := p.ctx
	locked := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := p.store.RawTx(ctx, func(tx dbsqlc.DBTX, last func()) error {
			var v int
			if err := tx.QueryRow(ctx, `SELECT v FROM tx_probe WHERE k = 'a' FOR UPDATE`).Scan(&v); err != nil {
				return err
			}
			close(locked)
			<-release
			last()
			_, err := tx.Exec(ctx, `UPDATE tx_probe SET v = v + 10 WHERE k = 'a'`)
			return err
		})
		done <- err
	}()
	select {
	case <-locked:
	case err := <-done:
		t.Fatalf("the locking transaction ended early: %v", err)
	}
	free, err := p.store.Pool().Query(ctx, `SELECT k FROM tx_probe WHERE k = 'a' FOR UPDATE SKIP LOCKED`)
	skipped := 0
	if err == nil {
		for free.Next() {
			skipped++
		}
		free.Close()
		err = free.Err()
	}
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if skipped != 0 {
		t.Errorf("the row locked by the transaction's first statement was free to another (%d rows)", skipped)
	}
	var v int
	if err := p.store.Pool().QueryRow(ctx, `SELECT v FROM tx_probe WHERE k = 'a'`).Scan(&v); err != nil || v != 11 {
		t.Errorf("after the locked update: v %d, %v; want 11", v, err)
	}
}

// TestGenericPlansStayInTheirTransaction: a transaction with generic plans
// (appends) runs its statements, the first and the last included, under
// plan_cache_mode force_generic_plan, and leaves the pooled connection as
// it was, whether it commits or fails.
func TestGenericPlansStayInTheirTransaction(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	show := func(tx dbsqlc.DBTX) string {
		t.Helper()
		var mode string
		if err := tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&mode); err != nil {
			t.Fatal(err)
		}
		return mode
	}
	for _, fail := range []bool{false, true} {
		var first, last string
		reusable, err := store.RawTxGenericPlans(ctx, func(tx dbsqlc.DBTX, markLast func()) error {
			first = show(tx)
			markLast()
			last = show(tx)
			if fail {
				return errors.New("fn failed")
			}
			return nil
		})
		if first != "force_generic_plan" || last != "force_generic_plan" || !reusable || (err != nil) != fail {
			t.Errorf("fail %v: plan_cache_mode %q then %q, reusable %v, err %v; want force_generic_plan in both, reusable", fail, first, last, reusable, err)
		}
	}
	// Every connection the pool holds is back to the default.
	conns := store.Pool().AcquireAllIdle(ctx)
	for _, c := range conns {
		if mode := show(c); mode != "auto" {
			t.Errorf("a pooled connection after the transactions runs plan_cache_mode %q, want auto", mode)
		}
		c.Release()
	}
	if len(conns) == 0 {
		t.Fatal("no idle connection to check")
	}
}
