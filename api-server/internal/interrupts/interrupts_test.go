package interrupts_test

import (
	"encoding/json"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mangohq/mango/api-server/internal/interrupts"
)

func payload(t *testing.T, in interrupts.Interrupt) string {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHubBroadcastsAndBounds: every subscription gets every interrupt; a
// full one loses the excess without blocking Notify (which runs on the
// listener's goroutine); a closed one gets nothing; undecodable payloads
// are ignored.
func TestHubBroadcastsAndBounds(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h := interrupts.NewHub(nil, reg)
	fast, slow, gone := h.Subscribe(), h.Subscribe(), h.Subscribe()
	gone.Close()
	if n := h.Streams(); n != 2 {
		t.Fatalf("Streams = %d after one of three closed, want 2", n)
	}
	h.Notify("not json")
	h.Notify(`{"session_id":"","event_id":"sevt_1"}`)
	total := interrupts.Buffer + 10
	for i := range total {
		h.Notify(payload(t, interrupts.Interrupt{SessionID: "sesn_1", EventID: "sevt_x", Seq: int64(i + 1)}))
		select { // the fast stream keeps up
		case in := <-fast.C():
			if in.Seq != int64(i+1) || in.SessionID != "sesn_1" {
				t.Fatalf("fast stream got %+v, want seq %d of sesn_1", in, i+1)
			}
		default:
			t.Fatalf("fast stream got nothing for interrupt %d", i+1)
		}
	}
	if n := len(slow.C()); n != interrupts.Buffer {
		t.Fatalf("slow stream holds %d interrupts, want its buffer of %d", n, interrupts.Buffer)
	}
	if in := <-slow.C(); in.Seq != 1 {
		t.Fatalf("slow stream's first interrupt has seq %d, want 1 (the oldest kept)", in.Seq)
	}
	if n := len(gone.C()); n != 0 {
		t.Fatalf("closed subscription received %d interrupts, want 0", n)
	}
	if got := value(t, reg, "mango_interrupts_dropped_total"); got != 10 {
		t.Errorf("dropped = %v, want 10", got)
	}
	if got := value(t, reg, "mango_interrupts_received_total"); got != float64(total) {
		t.Errorf("received = %v, want %d (undecodable payloads not counted)", got, total)
	}
}

// value reads a registered counter by name.
func value(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}
