// Package clock is the project's only door to wall-clock time: a Clock interface, the real
// clock, and a fake clock for tests.
//
// Packages that keep time (the MultiEndpoint state machine, the GCPMultiEndpoint pool
// monitor) take a Clock instead of calling time.Now or time.AfterFunc, so that their tests run
// on Fake, step by step, without sleeping.
package clock

import "time"

// Clock tells the time and runs functions later. Implementations are safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has elapsed (d <= 0: as soon as possible)
	// and returns a Timer that can cancel the call.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending call made by Clock.AfterFunc.
type Timer interface {
	// Stop prevents the call if it has not started yet. It reports whether it prevented it.
	// Stop does not wait for a call that has already started.
	Stop() bool
}

// Real is the Clock of the time package.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
