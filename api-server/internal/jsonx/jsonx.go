// Package jsonx decodes request bodies strictly: one JSON value, no unknown
// fields, no trailing data, and errors whose messages are safe to show to a
// client and name the offending field.
package jsonx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Decode decodes exactly one JSON value from data into v, rejecting unknown
// fields and trailing data. Errors are public (safe to show) and prefixed
// with path when it is not empty.
func Decode(data []byte, v any, path string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return describe(err, path)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return prefix(path, "unexpected data after the JSON value")
	}
	return nil
}

// Object checks that data holds a JSON object (not null, an array or a
// scalar), so that a body of `[]` or `"x"` gets a clear message.
func Object(data []byte, path string) error {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		return prefix(path, "expected a JSON object, got an empty body")
	}
	if trimmed[0] != '{' {
		return prefix(path, "expected a JSON object")
	}
	return nil
}

// DecodeObject checks that data holds a JSON object (Object), then decodes
// it into v (Decode).
func DecodeObject(data []byte, v any, path string) error {
	if err := Object(data, path); err != nil {
		return err
	}
	return Decode(data, v, path)
}

// ObjectType checks that data holds a JSON object (Object) and returns its
// "type" member (TypeOf), with errors at path.
func ObjectType(data []byte, path string) (string, error) {
	if err := Object(data, path); err != nil {
		return "", err
	}
	typ, err := TypeOf(data)
	if err != nil {
		return "", Errorf(path, "%v", err)
	}
	return typ, nil
}

// TypeOf returns the "type" member of a JSON object, or "" when absent.
func TypeOf(data []byte) (string, error) {
	var probe struct {
		Type *json.RawMessage `json:"type"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return "", err
	}
	if probe.Type == nil {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(*probe.Type, &s); err != nil {
		return "", errors.New("type: expected a string")
	}
	return s, nil
}

func describe(err error, path string) error {
	var syntax *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return prefix(path, fmt.Sprintf("malformed JSON at byte %d: %s", syntax.Offset, syntax.Error()))
	case errors.Is(err, io.EOF):
		return prefix(path, "expected a JSON value, got an empty body")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return prefix(path, "malformed JSON: unexpected end of input")
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return prefix(path, fmt.Sprintf("expected %s, got %s", jsonKind(typeErr.Type.Kind().String()), typeErr.Value))
		}
		return prefix(join(path, field), fmt.Sprintf("expected %s, got %s", jsonKind(typeErr.Type.Kind().String()), typeErr.Value))
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return prefix(path, "unknown field "+name)
	}
	if m, ok := err.(*Error); ok {
		return prefix(path, m.Message)
	}
	return prefix(path, strings.TrimPrefix(msg, "json: "))
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	}
	return "a " + goKind
}

// Error is a public decoding or validation error.
type Error struct {
	// Message names the field and what was wrong.
	Message string
}

func (e *Error) Error() string { return e.Message }

// Errorf builds a public error at path.
func Errorf(path, format string, args ...any) error {
	return prefix(path, fmt.Sprintf(format, args...))
}

func prefix(path, msg string) error {
	if path == "" {
		return &Error{Message: msg}
	}
	return &Error{Message: path + ": " + msg}
}

// join appends a field or index to a path: join("tools[0]", "name").
func join(path, field string) string {
	switch {
	case path == "":
		return field
	case strings.HasPrefix(field, "["):
		return path + field
	}
	return path + "." + field
}

// Opt is a JSON member that distinguishes absent, null and a value, for
// PATCH-like updates where "omit to preserve, null to clear".
type Opt[T any] struct {
	// Set reports that the member was present (possibly null).
	Set bool
	// Null reports that the member was present and null.
	Null bool
	// Value is the decoded value when Set and not Null.
	Value T
}

// UnmarshalJSON records presence and nullness.
func (o *Opt[T]) UnmarshalJSON(data []byte) error {
	o.Set = true
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		o.Null = true
		return nil
	}
	return json.Unmarshal(data, &o.Value)
}
