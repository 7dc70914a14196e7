//go:build !race

package spannerme

// raceEnabled reports whether the test binary was built with -race.
const raceEnabled = false
