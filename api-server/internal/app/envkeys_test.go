package app

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseEnvironmentKeyArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		args    string
		want    *EnvironmentKeyArgs
		wantErr string
	}{
		{name: "create", args: "create --environment env_1 --name ci --expires-in 720h",
			want: &EnvironmentKeyArgs{Action: "create", EnvironmentID: "env_1", Name: "ci", ExpiresIn: 720 * time.Hour}},
		{name: "create without options", args: "create --environment env_1", want: &EnvironmentKeyArgs{Action: "create", EnvironmentID: "env_1"}},
		{name: "list", args: "list --environment env_1", want: &EnvironmentKeyArgs{Action: "list", EnvironmentID: "env_1"}},
		{name: "revoke", args: "revoke envkey_1", want: &EnvironmentKeyArgs{Action: "revoke", KeyID: "envkey_1"}},
		{name: "nothing", args: "", wantErr: "usage:"},
		{name: "unknown action", args: "rotate", wantErr: `unknown action "rotate"`},
		{name: "create without environment", args: "create --name x", wantErr: "--environment is required"},
		{name: "list with a stray argument", args: "list --environment env_1 extra", wantErr: `unexpected arguments ["extra"]`},
		{name: "revoke without id", args: "revoke", wantErr: "revoke takes one key id"},
		{name: "bad duration", args: "create --environment env_1 --expires-in soon", wantErr: `invalid value "soon" for flag -expires-in`},
		{name: "negative duration", args: "create --environment env_1 --expires-in -1h", wantErr: "--expires-in must be positive"},
		{name: "list takes no name", args: "list --environment env_1 --name x", wantErr: "flag provided but not defined: -name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseEnvironmentKeyArgs(strings.Fields(tc.args))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseEnvironmentKeyArgs: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
