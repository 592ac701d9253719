package processors

import "github.com/kandle/kandle/internal/invariant"

// finals remembers, per key, the open time of the last final candle a
// processor emitted, to check (with the build tag invariants only: see
// package invariant) that a window is emitted final once: per key the open
// times of final candles strictly increase over the processor's lifetime.
// It is nil, and costs nothing, without the tag.
type finals map[string]int64

func newFinals() finals {
	if invariant.Enabled {
		return finals{}
	}
	return nil
}

// emitted checks and records a final candle of key opening at open, by
// processor kind what. Call it under `if invariant.Enabled`.
func (f finals) emitted(what, key string, open int64) {
	last, ok := f[key]
	invariant.Check(!ok || open > last, "%s: key %q: final candle of window %s emitted after the one of %s (a window is final once, in order)",
		what, key, fmtMS(open), fmtMS(last))
	f[key] = open
}
