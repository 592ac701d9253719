// Package invariant holds kandle's internal consistency checks: conditions
// that hold whatever the input, so a failing one is a bug in kandle, never
// bad data. They are compiled in only with the build tag invariants
// (`make race` runs the tests that way, with -race):
//
//	go test -race -tags invariants ./processors
//
// Without the tag Enabled is a false constant and every check compiles to
// nothing. In a hot path write
//
//	if invariant.Enabled {
//		invariant.Check(w >= old, "watermark went back from %d to %d", old, w)
//	}
//
// so that not even the arguments are evaluated; elsewhere a bare Check call
// is enough. A check that fails panics with its message, which names the
// invariant: a test run with the tag fails at the first violation, where it
// happens, instead of at a wrong output much later.
//
// What is checked:
//   - processors: a partition's watermark never goes back (aggregator,
//     across a restore and a lateness change too), the silence processor's
//     ingestion clock never goes back, a final candle is emitted only once
//     its window closed under the watermark, and per key the open times of
//     final candles strictly increase (a window is final once);
//   - state: a partition's changelog position in Pebble only grows (unless
//     the same batch drops the partition);
//   - engine: Pebble is written only after the transaction it follows
//     committed, so it is never ahead of the last commit.
package invariant

import "fmt"

// Check panics with the formatted message when the invariants are compiled
// in and cond is false; otherwise it does nothing.
func Check(cond bool, format string, args ...any) {
	if Enabled && !cond {
		panic("invariant violated: " + fmt.Sprintf(format, args...))
	}
}
