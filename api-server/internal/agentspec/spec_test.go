package agentspec

import (
	"encoding/json"
	"strings"
	"testing"
)

func mustCreate(t *testing.T, body string) *Spec {
	t.Helper()
	in, err := ParseInput([]byte(body))
	if err != nil {
		t.Fatalf("parse %s: %v", body, err)
	}
	s, err := Create(in)
	if err != nil {
		t.Fatalf("create %s: %v", body, err)
	}
	return s
}

func TestCreateDefaults(t *testing.T) {
	t.Parallel()
	s := mustCreate(t, `{"name":"a","model":"m","tools":[{"type":"agent_toolset_20260401","default_config":{"permission_policy":{"type":"always_ask"}}}]}`)
	if s.Model != (Model{ID: "m", Speed: "standard"}) {
		t.Errorf("model = %+v", s.Model)
	}
	ts := s.Tools[0].Toolset
	if ts == nil || len(ts.Configs) != len(BuiltinTools) {
		t.Fatalf("toolset = %+v, want all %d built-ins resolved", ts, len(BuiltinTools))
	}
	for _, c := range ts.Configs {
		want := AlwaysAsk
		if c.Name == "web_fetch" || c.Name == "web_search" {
			want = AlwaysAllow // web tools cannot be intercepted
		}
		if c.PermissionPolicy.Type != want || !c.Enabled {
			t.Errorf("%s = %+v, want enabled %s", c.Name, c, want)
		}
	}
	b, _ := json.Marshal(s)
	for _, want := range []string{`"metadata":{}`, `"mcp_servers":[]`, `"skills":[]`, `"multiagent":null`, `"execution_identity":{"type":"service_account"}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("spec JSON %s lacks %s", b, want)
		}
	}
}

func TestUpdateSemantics(t *testing.T) {
	t.Parallel()
	cur := mustCreate(t, `{"name":"a","model":"m","description":"d","system":"s","metadata":{"k":"v","x":"y"},
		"mcp_servers":[{"type":"url","name":"srv","url":"https://h/mcp"}],"tools":[{"type":"mcp_toolset","mcp_server_name":"srv"}]}`)
	tests := []struct {
		name    string
		body    string
		wantErr string
		check   func(t *testing.T, s *Spec)
	}{
		{name: "omitted members are preserved", body: `{}`, check: func(t *testing.T, s *Spec) {
			if !Equal(cur, s) {
				t.Errorf("empty update changed the spec")
			}
		}},
		{name: "null clears description, empty clears system", body: `{"description":null,"system":""}`, check: func(t *testing.T, s *Spec) {
			if s.Description != "" || s.System != "" || s.Name != "a" {
				t.Errorf("got %+v", s)
			}
		}},
		{name: "metadata patch", body: `{"metadata":{"k":null,"n":"1"}}`, check: func(t *testing.T, s *Spec) {
			if len(s.Metadata) != 2 || s.Metadata["x"] != "y" || s.Metadata["n"] != "1" {
				t.Errorf("metadata = %v", s.Metadata)
			}
		}},
		{name: "tools null clears but leaves server unreferenced", body: `{"tools":null}`, wantErr: "not referenced"},
		{name: "tools and servers cleared together", body: `{"tools":[],"mcp_servers":null}`, check: func(t *testing.T, s *Spec) {
			if len(s.Tools) != 0 || len(s.MCPServers) != 0 {
				t.Errorf("tools %d servers %d", len(s.Tools), len(s.MCPServers))
			}
		}},
		{name: "execution identity null restores default", body: `{"execution_identity":null}`, check: func(t *testing.T, s *Spec) {
			if s.ExecutionIdentity.Type != "service_account" {
				t.Errorf("identity = %+v", s.ExecutionIdentity)
			}
		}},
		{name: "aws role", body: `{"execution_identity":{"type":"aws_role","role_arn":"arn:aws:iam::1:role/r"}}`, check: func(t *testing.T, s *Spec) {
			if s.ExecutionIdentity.RoleARN == "" {
				t.Errorf("identity = %+v", s.ExecutionIdentity)
			}
		}},
		{name: "name cannot be cleared", body: `{"name":null}`, wantErr: "cannot be cleared"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in, err := ParseInput([]byte(tc.body))
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			next, err := Update(cur, in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("update: %v", err)
			}
			tc.check(t, next)
			if cur.Description != "d" || len(cur.Metadata) != 2 {
				t.Errorf("update mutated the current spec")
			}
		})
	}
}

func TestTypeErrorsNameTheField(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"name":1,"model":"m"}`:                      "name",
		`{"name":"a","model":"m","metadata":{"k":1}}`: "metadata",
		`{"name":"a","model":{"id":5}}`:               "model",
	} {
		in, err := ParseInput([]byte(body))
		if err == nil {
			_, err = Create(in)
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error = %v, want one naming %q", body, err, want)
		}
	}
}

// TestUpdateOfAnUnencodableSpecFails: a current spec that does not encode
// (a malformed raw field read back from storage) makes Update return an
// error, which the handler answers as a 500, instead of panicking in the
// request.
func TestUpdateOfAnUnencodableSpecFails(t *testing.T) {
	t.Parallel()
	cur := mustCreate(t, `{"name":"a","model":"m"}`)
	cur.Multiagent = json.RawMessage(`{"broken":`)
	in, err := ParseInput([]byte(`{"name":"b"}`))
	if err != nil {
		t.Fatal(err)
	}
	var next *Spec
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("Update of an unencodable spec panicked (%v); want an error", r)
			}
		}()
		next, err = Update(cur, in)
	}()
	if err == nil || next != nil || !strings.Contains(err.Error(), "copy the current spec") {
		t.Fatalf("Update of an unencodable spec = %v, %v; want no spec and an error naming the copy", next, err)
	}
}
