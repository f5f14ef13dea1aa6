//go:build race

package main_test

// raceEnabled: the tests run with the race detector, so the binary is
// built with it too (a race it reports makes it exit with status 66).
const raceEnabled = true
