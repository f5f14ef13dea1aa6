package envconf_test

import (
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/mangohq/mango/internal/envconf"
)

type settings struct {
	Name    string        `env:"T_NAME"`
	Count   int           `env:"T_COUNT"`
	Wait    time.Duration `env:"T_WAIT"`
	On      bool          `env:"T_ON"`
	List    []string      `env:"T_LIST"`
	Skipped string
}

func TestParse(t *testing.T) {
	t.Parallel()
	env := map[string]string{"T_NAME": "  padded ", "T_COUNT": " 7", "T_WAIT": "   ", "T_LIST": "a,b", "Skipped": "x"}
	s := settings{Wait: time.Minute, Name: "default"}
	if errs := envconf.Parse(&s, func(k string) string { return env[k] }, nil); errs != nil {
		t.Fatalf("Parse = %v, want no error", errs)
	}
	want := settings{Name: "padded", Count: 7, Wait: time.Minute, List: []string{"a", "b"}}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("Parse filled %+v, want %+v (values trimmed, blank as unset, untagged fields left alone)", s, want)
	}
}

func TestParseReportsEveryVariable(t *testing.T) {
	t.Parallel()
	env := map[string]string{"T_COUNT": "many", "T_WAIT": "soon", "T_ON": " maybe "}
	errBool := errors.New("not a boolean")
	parsers := envconf.Parsers{reflect.TypeFor[bool](): func(string) (any, error) { return nil, errBool }}
	var s settings
	errs := envconf.Parse(&s, func(k string) string { return env[k] }, parsers)
	var got []string
	for _, e := range errs {
		got = append(got, e.Var+"="+strconv.Quote(e.Value))
	}
	want := []string{`T_COUNT="many"`, `T_WAIT="soon"`, `T_ON="maybe"`}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse errors for %v, want %v", got, want)
	}
	if !errors.Is(errs[2], errBool) || errs[2].Error() != "T_ON: not a boolean" {
		t.Errorf("error %v, want %q wrapping the parser's error", errs[2], "T_ON: not a boolean")
	}
}

func TestUnless(t *testing.T) {
	t.Parallel()
	env := map[string]string{"NEW": "1", "OLD": "2"}
	getenv := envconf.Unless(func(k string) string { return env[k] }, "OLD", "NEW")
	if got := getenv("OLD"); got != "" {
		t.Errorf("OLD while NEW is set = %q, want it hidden", got)
	}
	env["NEW"] = " "
	if got := getenv("OLD"); got != "2" {
		t.Errorf("OLD while NEW is blank = %q, want 2", got)
	}
}

func TestParsePanicsOnAProgrammingError(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Error("Parse(non-pointer) returned, want a panic")
		}
	}()
	envconf.Parse(settings{}, func(string) string { return "" }, nil)
}

// TestParseReadsOnlyGetenv: the process environment is not read, also when
// getenv sets nothing (env's default is os.Environ).
func TestParseReadsOnlyGetenv(t *testing.T) {
	t.Setenv("T_NAME", "from the process")
	s := settings{Name: "default"}
	if errs := envconf.Parse(&s, func(string) string { return "" }, nil); errs != nil || s.Name != "default" {
		t.Errorf("Parse = %v, Name %q; want no error and the default", errs, s.Name)
	}
}
