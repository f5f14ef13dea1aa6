// Package envconf reads a component's configuration from environment
// variables with github.com/caarlos0/env/v11, through the getenv function
// the component is given (os.Getenv in production, a map in tests).
//
// The component declares its variables as a struct whose fields carry
// `env:"NAME"` tags; fields are filled by their type (strings, integers,
// floats, booleans, durations, or a parser the component supplies). A
// field's default is the value it holds before [Parse]: an unset variable
// leaves it alone. Values are trimmed of surrounding white space, and a
// value that is empty after trimming counts as unset.
//
// Parse reports every variable whose value does not parse, each naming its
// variable, so that the component adds its own checks and returns all its
// errors at once.
//
// env v11 reads one name per field. A variable with an older name or an
// alias is declared as two fields and resolved by the component after
// Parse; [Unless] hides the second name while the first is set, for the
// rule "the first name wins, the second is read only when the first is
// unset".
package envconf

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/caarlos0/env/v11"
)

// Parsers are parsers by field type, added to or replacing env's own.
type Parsers = map[reflect.Type]env.ParserFunc

// Error is a variable whose value did not parse.
type Error struct {
	// Var is the variable's name.
	Var string
	// Value is its value, trimmed.
	Value string
	// Err is the parser's error.
	Err error
}

// Error returns "VAR: cause".
func (e *Error) Error() string { return e.Var + ": " + e.Err.Error() }

// Unwrap returns the parser's error.
func (e *Error) Unwrap() error { return e.Err }

// Parse fills the struct cfg points to from the variables its `env` tags
// name, read through getenv, and returns the variables that did not parse,
// in field order (nil when all did). It panics if cfg is not a pointer to
// a struct of flat, tagged fields that env can parse: that is a programming
// error, caught by any test that loads the configuration.
func Parse(cfg any, getenv func(string) string, parsers Parsers) []*Error {
	vars := tagged(cfg)
	environment := make(map[string]string, len(vars))
	for _, name := range vars {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			environment[name] = v
		}
	}
	err := env.ParseWithOptions(cfg, env.Options{Environment: environment, FuncMap: parsers})
	if err == nil {
		return nil
	}
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		panic(fmt.Sprintf("envconf: %v", err))
	}
	out := make([]*Error, 0, len(agg.Errors))
	for _, e := range agg.Errors {
		var pe env.ParseError
		if !errors.As(e, &pe) {
			panic(fmt.Sprintf("envconf: %v", e))
		}
		name := vars[pe.Name]
		out = append(out, &Error{Var: name, Value: environment[name], Err: pe.Err})
	}
	return out
}

// tagged maps the names of cfg's tagged fields to their variables.
func tagged(cfg any) map[string]string {
	t := reflect.TypeOf(cfg)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("envconf: %T is not a pointer to a struct", cfg))
	}
	t = t.Elem()
	vars := make(map[string]string, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("env"), ",")
		if name != "" && name != "-" {
			vars[t.Field(i).Name] = name
		}
	}
	return vars
}

// Unless returns a getenv that reports name as unset while first is set
// (non-blank), and otherwise serves getenv: the older name or alias name is
// read only when first is not.
func Unless(getenv func(string) string, name, first string) func(string) string {
	return func(k string) string {
		if k == name && strings.TrimSpace(getenv(first)) != "" {
			return ""
		}
		return getenv(k)
	}
}
