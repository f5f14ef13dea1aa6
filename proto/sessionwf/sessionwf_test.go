package sessionwf_test

import (
	"strings"
	"testing"

	sessionv1 "github.com/mangohq/mango/proto/gen/mango/session/v1"
	"github.com/mangohq/mango/proto/sessionwf"
)

func TestNames(t *testing.T) {
	t.Parallel()
	tests := []struct{ got, want string }{
		{sessionwf.WorkflowType, "SessionWorkflow"},
		{sessionwf.SignalWakeup, "wakeup"},
		{sessionwf.WorkflowID("sesn_01abc"), "sesn_01abc"},
		{sessionwf.TaskQueue("local"), "mango.local"},
		{sessionwf.TaskQueue("docker"), "mango.docker"},
		{sessionwf.LocalityTaskQueue("local", "0f3a9c-1b2c3d4e"), "mango.local.0f3a9c-1b2c3d4e"},
		{sessionwf.Queues{Prefix: "t1"}.Locality("docker", "abcd"), "t1.docker.abcd"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestKindFromOutbox(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind   string
		want   sessionv1.WakeupKind
		wantOK bool
	}{
		{"wakeup", sessionv1.WakeupKind_WAKEUP_KIND_WAKEUP, true},
		{"interrupt", sessionv1.WakeupKind_WAKEUP_KIND_INTERRUPT, true},
		{"delete", sessionv1.WakeupKind_WAKEUP_KIND_DELETE, true},
		{"bogus", sessionv1.WakeupKind_WAKEUP_KIND_UNSPECIFIED, false},
		{"", sessionv1.WakeupKind_WAKEUP_KIND_UNSPECIFIED, false},
	}
	for _, tt := range tests {
		got, ok := sessionwf.KindFromOutbox(tt.kind)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("KindFromOutbox(%q) = %v, %v; want %v, %v", tt.kind, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestEventID(t *testing.T) {
	t.Parallel()
	a := sessionwf.EventID("sesn_A", "t1/0/message")
	if a != sessionwf.EventID("sesn_A", "t1/0/message") {
		t.Fatal("EventID is not deterministic")
	}
	if len(a) != len("sevt_")+24 || !strings.HasPrefix(a, "sevt_") {
		t.Fatalf("EventID = %q, want sevt_ and 24 characters", a)
	}
	for _, c := range a[len("sevt_"):] {
		if !strings.ContainsRune("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", c) {
			t.Fatalf("EventID = %q has a non-base62 character %q", a, c)
		}
	}
	seen := map[string]bool{a: true}
	for _, other := range [][2]string{{"sesn_B", "t1/0/message"}, {"sesn_A", "t1/1/message"}, {"sesn_A\x00t1", "0/message"}} {
		id := sessionwf.EventID(other[0], other[1])
		if seen[id] {
			t.Errorf("EventID(%q, %q) = %q collides", other[0], other[1], id)
		}
		seen[id] = true
	}
}
