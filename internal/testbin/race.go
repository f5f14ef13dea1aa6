//go:build race

package testbin

// raceEnabled: the tests run with the race detector, so the binaries are
// built with it too.
const raceEnabled = true
