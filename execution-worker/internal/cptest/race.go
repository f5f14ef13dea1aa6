//go:build race

package cptest

// raceEnabled: the tests run with the race detector, so the api-server is
// built with it too.
const raceEnabled = true
