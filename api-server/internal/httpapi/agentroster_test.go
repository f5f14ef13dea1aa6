package httpapi

import (
	"strings"
	"testing"

	"github.com/mangohq/mango/api-server/internal/agentspec"
)

// TestPinOwner: the entry naming the agent being written (self, or its id
// without a version) becomes the owner at the version being written, and
// names only a version that exists.
func TestPinOwner(t *testing.T) {
	t.Parallel()
	owner := rosterOwner{ID: "agent_own", Version: 4}
	self := agentspec.RosterEntry{Type: agentspec.EntrySelf}
	pinned := agentspec.RosterEntry{Type: agentspec.EntryAgent, ID: "agent_own", Version: 4}
	tests := []struct {
		name       string
		entry      agentspec.RosterEntry
		predefined bool
		want       agentspec.RosterEntry
		wantPin    bool
		wantErr    string
	}{
		{name: "coordinator self pins the version written", entry: self, want: pinned, wantPin: true},
		{name: "predefined self pins the version written", entry: self, predefined: true, want: pinned, wantPin: true},
		{name: "own id without version pins the version written", entry: agentspec.RosterEntry{Type: agentspec.EntryAgent, ID: "agent_own"}, want: pinned, wantPin: true},
		{name: "own id at an existing version", entry: agentspec.RosterEntry{Type: agentspec.EntryAgent, ID: "agent_own", Version: 3}, predefined: true,
			want: agentspec.RosterEntry{Type: agentspec.EntryAgent, ID: "agent_own", Version: 3}},
		{name: "own id at the version being written", entry: agentspec.RosterEntry{Type: agentspec.EntryAgent, ID: "agent_own", Version: 4},
			wantErr: "multiagent.agents[0].version: agent \"agent_own\" has no version 4 yet"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := tc.entry
			pin, err := pinOwner(agentspec.RosterRef{Path: "multiagent.agents[0]", Entry: &e, Predefined: tc.predefined}, owner)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || pin != tc.wantPin || e != tc.want {
				t.Errorf("pinOwner = %+v, pinned %v, %v; want %+v, pinned %v", e, pin, err, tc.want, tc.wantPin)
			}
		})
	}
}
