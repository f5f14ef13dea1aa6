package sessionwf_test

import (
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
		{sessionwf.HostTaskQueue("local", "host-1-42"), "mango.local.host-1-42"},
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
