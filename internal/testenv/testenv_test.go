package testenv_test

import (
	"runtime"
	"testing"

	"github.com/mangohq/mango/internal/testenv"
)

// recorder is a testing.TB that records how a helper ended it instead of
// ending the calling test; like testing.T, Fatalf and Skipf stop the
// goroutine that calls them.
type recorder struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = true
	r.msg = format
	runtime.Goexit()
}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = true
	r.msg = format
	runtime.Goexit()
}

func TestGetenv(t *testing.T) {
	tests := []struct {
		name              string
		value, require    string
		want              string
		wantFail, wantSkp bool
	}{
		{name: "set", value: "127.0.0.1:1", want: "127.0.0.1:1"},
		{name: "set while required", value: "127.0.0.1:1", require: "1", want: "127.0.0.1:1"},
		{name: "unset skips", wantSkp: true},
		{name: "unset fails when required", require: "1", wantFail: true},
		{name: "unset skips unless exactly 1", require: "true", wantSkp: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("MANGO_TESTENV_PROBE", tt.value)
			t.Setenv(testenv.EnvRequireServices, tt.require)
			r := &recorder{TB: t}
			var got string
			done := make(chan struct{})
			go func() {
				defer close(done)
				got = testenv.Getenv(r, "MANGO_TESTENV_PROBE")
			}()
			<-done
			if got != tt.want || r.failed != tt.wantFail || r.skipped != tt.wantSkp {
				t.Errorf("Getenv = %q, failed %v, skipped %v; want %q, failed %v, skipped %v",
					got, r.failed, r.skipped, tt.want, tt.wantFail, tt.wantSkp)
			}
		})
	}
}
