// Package clock is kandle's one notion of wall time. Code that needs the
// time takes a Clock instead of calling time.Now, so live runs pass System
// while replays and tests pass a Fixed clock (or their own) and get results
// that depend only on their input.
package clock

import "time"

// Clock tells the wall time.
type Clock interface{ Now() time.Time }

// System is the wall clock.
type System struct{}

// Now returns time.Now().
func (System) Now() time.Time { return time.Now() }

// Fixed is a Clock that always says T (replay: the time it started).
type Fixed struct{ T time.Time }

// Now returns c.T.
func (c Fixed) Now() time.Time { return c.T }
