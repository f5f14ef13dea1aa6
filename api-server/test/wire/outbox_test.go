package wire

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/internal/poll"
	"github.com/mangohq/mango/internal/temporaltest"
	"github.com/mangohq/mango/proto/sessionwf"
)

// TestUserMessageWhileTemporalIsDown is the outbox's acceptance test over
// HTTP: with Temporal stopped, sending a user.message returns 200 and the
// event is listed; once Temporal is up the api-server's relay starts the
// session's workflow on mango.local and the outbox drains.
func TestUserMessageWhileTemporalIsDown(t *testing.T) {
	t.Parallel()
	dev := temporaltest.Reserve(t)
	srv := testserver.Start(t, testserver.WithEnv("MANGO_TEMPORAL_HOSTPORT", dev.HostPort))
	id := newSession(t, srv)

	start := time.Now()
	if r := send(t, srv, id, msg); r.status != http.StatusOK {
		t.Fatalf("send user.message with Temporal down: %d %s", r.status, r.body)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("send with Temporal down took %v, want at most 3s", d)
	}
	list := do(t, srv, http.MethodGet, "/v1/sessions/"+id+"/events", "", nil, nil)
	var page struct {
		Data []struct{ Type string } `json:"data"`
	}
	if err := json.Unmarshal(list.body, &page); err != nil || list.status != http.StatusOK || len(page.Data) == 0 || page.Data[0].Type != "user.message" {
		t.Fatalf("list events = %d %s (%v); want the user.message listed", list.status, list.body, err)
	}

	pool, err := pgxpool.New(context.Background(), srv.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	depth := func() int {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE session_id = $1`, id).Scan(&n); err != nil {
			t.Fatalf("count outbox rows: %v", err)
		}
		return n
	}
	if n := depth(); n != 1 {
		t.Fatalf("outbox rows while Temporal is down = %d, want 1", n)
	}

	dev.Start(t)
	poll.Until(t, 60*time.Second, "the outbox to drain after Temporal started", func() (bool, string) {
		n := depth()
		return n == 0, fmt.Sprintf("%d rows", n)
	})
	c := temporaltest.Dial(t, dev.HostPort)
	desc, err := c.DescribeWorkflow(context.Background(), sessionwf.WorkflowID(id), "")
	if err != nil {
		t.Fatalf("DescribeWorkflow(%s): %v", id, err)
	}
	if tq, want := desc.RawResponse.GetWorkflowExecutionInfo().GetTaskQueue(), srv.TaskQueuePrefix+".local"; tq != want {
		t.Errorf("workflow task queue = %q, want %s", tq, want)
	}
}
