//go:build !linux

package main

// watchRaces is not implemented off Linux: races are not counted by the run (a race still
// makes a -race binary exit with status 66).
func watchRaces() func() int { return nil }
