package sandbox

import (
	"fmt"

	"github.com/mangohq/mango/internal/envconf"
)

// ReadEnv reads the variables named by the `env` tags of the struct cfg
// points to through getenv, with the rules of package envconf (values
// trimmed, blank as unset, a field's prior value as its default). Each
// variable whose value does not parse is returned as an [EnvError] with
// the message want holds for it (the parser's error when it holds none).
func ReadEnv(cfg any, getenv func(string) string, want map[string]string, parsers envconf.Parsers) []error {
	var errs []error
	for _, e := range envconf.Parse(cfg, getenv, parsers) {
		msg, ok := want[e.Var]
		if !ok {
			msg = e.Err.Error()
		}
		errs = append(errs, EnvError(e.Var, e.Value, msg))
	}
	return errs
}

// EnvError is a provider's error for a variable whose value is refused:
// `VAR="value": want`, want saying what was expected.
func EnvError(name, value, want string) error {
	return fmt.Errorf("%s=%q: %s", name, value, want)
}
