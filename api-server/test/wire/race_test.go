//go:build race

package wire

// raceEnabled: the tests run with the race detector, so the worker binary
// they start is built with it too.
const raceEnabled = true
