package sandbox_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

func TestLimitsFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		timeout, output string
		want            sandbox.Limits
		wantErr         string
	}{
		{"", "", sandbox.Limits{}, ""},
		{"30s", "1048576", sandbox.Limits{ExecTimeout: 30 * time.Second, MaxOutput: 1 << 20}, ""},
		{"2m", "512k", sandbox.Limits{ExecTimeout: 2 * time.Minute, MaxOutput: 512 << 10}, ""},
		{"", "1m", sandbox.Limits{MaxOutput: 1 << 20}, ""},
		{"", "1G", sandbox.Limits{MaxOutput: 1 << 30}, ""},
		{"soon", "", sandbox.Limits{}, "MANGO_SANDBOX_EXEC_TIMEOUT"},
		{"-1s", "", sandbox.Limits{}, "MANGO_SANDBOX_EXEC_TIMEOUT"},
		{"", "lots", sandbox.Limits{}, "MANGO_SANDBOX_MAX_OUTPUT"},
		{"", "0", sandbox.Limits{}, "MANGO_SANDBOX_MAX_OUTPUT"},
		{"", "2g", sandbox.Limits{}, "MANGO_SANDBOX_MAX_OUTPUT"},
	}
	for _, tc := range tests {
		env := map[string]string{sandbox.EnvExecTimeout: tc.timeout, sandbox.EnvMaxOutput: tc.output}
		got, err := sandbox.LimitsFromEnv(func(k string) string { return env[k] })
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q/%q: error %v, want one naming %s", tc.timeout, tc.output, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q/%q = %+v, %v; want %+v", tc.timeout, tc.output, got, err, tc.want)
		}
	}
}

func TestReadLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		timeout, output string
		wantTimeout     time.Duration
		wantOutput      int
		wantErr         bool
	}{
		{"", "", time.Minute, 100, false},         // unset: the config keeps its values
		{"30s", "", 30 * time.Second, 100, false}, // each set variable replaces one
		{"", "1k", time.Minute, 1 << 10, false},
		{"30s", "lots", time.Minute, 100, true}, // an error replaces nothing
	}
	for _, tc := range tests {
		env := map[string]string{sandbox.EnvExecTimeout: tc.timeout, sandbox.EnvMaxOutput: tc.output}
		timeout, output := time.Minute, 100
		err := sandbox.ReadLimits(func(k string) string { return env[k] }, &timeout, &output)
		if (err != nil) != tc.wantErr || timeout != tc.wantTimeout || output != tc.wantOutput {
			t.Errorf("ReadLimits(%q, %q) = %v, %d, %v; want %v, %d, error %v", tc.timeout, tc.output, timeout, output, err, tc.wantTimeout, tc.wantOutput, tc.wantErr)
		}
	}
}

func TestOutputKeepsTheFirstBytesAndDrainsTheRest(t *testing.T) {
	out := sandbox.NewOutput(5)
	for _, chunk := range []string{"abc", "defg", "hij"} {
		if n, err := out.Stdout.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write(%q) = %d, %v; want every byte accepted", chunk, n, err)
		}
	}
	_, _ = out.Stderr.Write([]byte("err"))
	r := out.Result(3, false, time.Second)
	if string(r.Stdout) != "abcde" || string(r.Stderr) != "err" || !r.Truncated || r.ExitCode != 3 || r.TimedOut || r.Duration != time.Second {
		t.Errorf("Result = %+v; want stdout abcde, stderr err, truncated, exit 3", r)
	}
	if r := sandbox.NewOutput(5).Result(-1, true, 0); r.Truncated || !r.TimedOut || r.ExitCode != -1 {
		t.Errorf("empty timed-out Result = %+v", r)
	}
}
