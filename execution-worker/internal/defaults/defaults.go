// Package defaults fills the numeric fields of a configuration that were
// left unset. Strings and pointers need no help: cmp.Or returns the first
// non-zero value.
package defaults

// Number is what Positive and Limit fill in.
type Number interface {
	~int | ~int64 | ~float64
}

// Positive returns v, or d when v is zero or negative (unset).
func Positive[T Number](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

// Limit returns a limit where zero means unset and a negative value means
// none: v when it is positive, d when it is zero, and 0 (no limit) when it
// is negative.
func Limit[T Number](v, d T) T {
	switch {
	case v == 0:
		return d
	case v < 0:
		return 0
	}
	return v
}
