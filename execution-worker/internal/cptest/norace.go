//go:build !race

package cptest

const raceEnabled = false
