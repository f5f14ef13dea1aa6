package app_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	enums "go.temporal.io/api/enums/v1"

	"github.com/mangohq/mango/execution-worker/workflows/session"
	"github.com/mangohq/mango/internal/temporaltest"
	"github.com/mangohq/mango/proto/sessionwf"
)

// TestTurnsOfABoundSessionRunEagerly: with the defaults an operator gets,
// the first turn of a local session goes through the provider's queue;
// once the sandbox is bound to the worker's locality, later turns are
// scheduled on the workflow's own queue naming the locality (so Temporal
// hands them to the workflow's worker at once), and they run there.
func TestTurnsOfABoundSessionRunEagerly(t *testing.T) {
	t.Parallel()
	srv, env := startStack(t)
	runWorker(t, env)
	sid := srv.NewSession(t, "local")
	sendMessage(t, srv, sid, `#tool bash {"command":"echo one > f.txt"}`)
	waitFor(t, srv, sid, func(e []listedEvent) bool { return idleCount(e) == 1 })
	sendMessage(t, srv, sid, `#tool bash {"command":"cat f.txt"}`)
	evs := waitFor(t, srv, sid, func(e []listedEvent) bool { return idleCount(e) == 2 })
	if out := toolResults(evs); len(out) != 2 || !strings.Contains(out[1], "one") {
		t.Fatalf("tool results %q: want the second turn to read the first one's file", out)
	}

	provider := sessionwf.Queues{Prefix: env["MANGO_TASK_QUEUE_PREFIX"]}.Provider("local")
	c := temporaltest.Dial(t, env["MANGO_TEMPORAL_HOSTPORT"])
	it := c.GetWorkflowHistory(context.Background(), sessionwf.WorkflowID(sid), "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var turns []session.RunTurnInput
	markers := 0
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetEventType() == enums.EVENT_TYPE_MARKER_RECORDED {
			markers++
		}
		a := ev.GetActivityTaskScheduledEventAttributes()
		if a.GetActivityType().GetName() != session.RunTurnActivity {
			continue
		}
		if q := a.GetTaskQueue().GetName(); q != provider {
			t.Errorf("turn %d scheduled on %s, want the workflow's queue %s", len(turns)+1, q, provider)
		}
		var in session.RunTurnInput
		if err := json.Unmarshal(a.GetInput().GetPayloads()[0].GetData(), &in); err != nil {
			t.Fatal(err)
		}
		turns = append(turns, in)
	}
	if len(turns) != 2 {
		t.Fatalf("%d RunTurn activities, want 2", len(turns))
	}
	if turns[0].Locality != "" || turns[0].TaskQueue != "" {
		t.Errorf("first turn input %+v: want neither a locality nor a queue (no sandbox yet)", turns[0])
	}
	if !strings.HasPrefix(turns[1].Locality, provider+".") || turns[1].TaskQueue != "" {
		t.Errorf("second turn input %+v: want the locality queue %s.<locality> in Locality, no TaskQueue", turns[1], provider)
	}
	if markers == 0 {
		t.Error("no marker in the history: the decision to run eagerly must be recorded")
	}
}
