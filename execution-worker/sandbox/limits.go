package sandbox

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/mangohq/mango/internal/envconf"
)

// Environment variables every provider reads for its command limits.
const (
	EnvExecTimeout = "MANGO_SANDBOX_EXEC_TIMEOUT"
	EnvMaxOutput   = "MANGO_SANDBOX_MAX_OUTPUT"
)

// Default command limits of every provider, for the limits not set.
const (
	DefaultExecTimeout = 2 * time.Minute
	DefaultMaxOutput   = 1 << 20 // 1 MiB
)

// Limits are a provider's default command limits. Zero means "not set"
// (the provider's own default applies).
type Limits struct {
	// ExecTimeout is the default command timeout.
	ExecTimeout time.Duration
	// MaxOutput caps stdout and stderr, each, in bytes.
	MaxOutput int
}

// maxOutputCeiling bounds MANGO_SANDBOX_MAX_OUTPUT.
const maxOutputCeiling = 1 << 30

// limitVars are the variables of [Limits].
type limitVars struct {
	ExecTimeout time.Duration `env:"MANGO_SANDBOX_EXEC_TIMEOUT"`
	MaxOutput   outputSize    `env:"MANGO_SANDBOX_MAX_OUTPUT"`
}

// outputSize is a size in bytes, optionally with a k, m or g suffix.
type outputSize int64

// Messages of the limits' variables.
const (
	wantExecTimeout = "want a positive duration such as 2m"
	wantMaxOutput   = "want a positive size up to 1g, in bytes or such as 512k or 1m"
)

// LimitsFromEnv reads the command limits shared by every provider, so the
// same variable means the same thing whichever provider a worker serves:
// MANGO_SANDBOX_EXEC_TIMEOUT is a positive Go duration (2m), and
// MANGO_SANDBOX_MAX_OUTPUT a positive size in bytes, optionally with a k,
// m or g suffix (binary units), up to 1g. Errors name the variable.
func LimitsFromEnv(getenv func(string) string) (Limits, error) {
	var v limitVars
	errs := ReadEnv(&v, getenv, map[string]string{EnvExecTimeout: wantExecTimeout, EnvMaxOutput: wantMaxOutput},
		envconf.Parsers{
			reflect.TypeFor[time.Duration](): PositiveDuration,
			reflect.TypeFor[outputSize](): func(s string) (any, error) {
				n, err := parseSize(s)
				if err != nil || n <= 0 || n > maxOutputCeiling {
					return nil, fmt.Errorf("invalid size %q", s)
				}
				return outputSize(n), nil
			},
		})
	return Limits{ExecTimeout: v.ExecTimeout, MaxOutput: int(v.MaxOutput)}, errors.Join(errs...)
}

// ReadLimits reads [LimitsFromEnv] into a provider's configuration: each
// variable that is set replaces the value at execTimeout or maxOutput. On
// an error (LimitsFromEnv's) nothing is replaced.
func ReadLimits(getenv func(string) string, execTimeout *time.Duration, maxOutput *int) error {
	l, err := LimitsFromEnv(getenv)
	if err != nil {
		return err
	}
	*execTimeout = cmp.Or(l.ExecTimeout, *execTimeout)
	*maxOutput = cmp.Or(l.MaxOutput, *maxOutput)
	return nil
}

// PositiveDuration parses a positive Go duration, for [ReadEnv].
func PositiveDuration(v string) (any, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return nil, fmt.Errorf("invalid duration %q", v)
	}
	return d, nil
}

func parseSize(v string) (int64, error) {
	mult := int64(1)
	switch strings.ToLower(v[len(v)-1:]) {
	case "k":
		mult, v = 1<<10, v[:len(v)-1]
	case "m":
		mult, v = 1<<20, v[:len(v)-1]
	case "g":
		mult, v = 1<<30, v[:len(v)-1]
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n > maxOutputCeiling {
		return 0, fmt.Errorf("invalid size %q", v)
	}
	return n * mult, nil
}

// CapWriter keeps the first Limit bytes written to it and records whether
// more arrived. It never fails, so the stream it is fed from keeps being
// drained.
type CapWriter struct {
	Limit     int
	Truncated bool
	buf       bytes.Buffer
}

func (w *CapWriter) Write(p []byte) (int, error) {
	keep := p
	if room := max(w.Limit-w.buf.Len(), 0); room < len(p) {
		w.Truncated = true
		keep = p[:room]
	}
	w.buf.Write(keep)
	return len(p), nil
}

// Bytes returns what was kept.
func (w *CapWriter) Bytes() []byte { return w.buf.Bytes() }

// String returns what was kept.
func (w *CapWriter) String() string { return w.buf.String() }

// Output collects a command's stdout and stderr, each capped at a limit.
type Output struct {
	Stdout, Stderr CapWriter
}

// NewOutput returns an Output keeping up to limit bytes of each stream.
func NewOutput(limit int) *Output {
	return &Output{Stdout: CapWriter{Limit: limit}, Stderr: CapWriter{Limit: limit}}
}

// Result is the command's result: what the streams kept, its exit code
// (-1 when it timed out), and how long it ran.
func (o *Output) Result(exitCode int, timedOut bool, d time.Duration) *ExecResult {
	return &ExecResult{
		ExitCode: exitCode, Stdout: o.Stdout.Bytes(), Stderr: o.Stderr.Bytes(),
		Truncated: o.Stdout.Truncated || o.Stderr.Truncated, TimedOut: timedOut, Duration: d,
	}
}
