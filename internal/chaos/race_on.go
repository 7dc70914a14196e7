//go:build race

package chaos

// RaceEnabled reports whether the binary was built with -race.
const RaceEnabled = true
