package serve

import (
	"context"
	"math"
	"slices"
	"strings"

	"github.com/kandle/kandle/candle"
)

// A timeframe that is not stored is built at query time from the finest
// stored timeframe that nests in it (every window an exact union of stored
// windows: 3m from 1m, 6h from 1h or 2h, 3d from 1d, 1w and 1M from 1d),
// aligned like the stored ones: seconds, minutes and hours to the epoch,
// days, weeks and months to local midnight in the zone of the stored
// calendar timeframes. Its candles combine the stored ones with the
// rollup's rule (candle.Merge), so a derived candle equals the candle a
// rollup of that timeframe would have stored.
//
// Limits: one request reads at most maxDerivedReads stored candles, so
// limit × (stored candles per derived candle) must stay within it (1h from
// 1m: 60 per candle, any limit up to 832; 1d from 1m: up to 33), and the
// start..end span counts derived windows against max_range_windows.

// maxDerivedReads is the most stored candles one derived request reads.
const maxDerivedReads = 50_000

// derivedSuggestions are the derived timeframes /udf/config and
// /v1/timeframes offer when they can be built (any other multiple works too).
var derivedSuggestions = []string{"3m", "5m", "15m", "30m", "1h", "2h", "4h", "6h", "12h", "1d", "3d", "1w", "1M"}

// timeframe resolves a timeframe name: a stored one (base is zero), or one
// built from the stored timeframe base.
func (s *Server) timeframe(name string) (tf, base candle.Timeframe, err error) {
	if tf, ok := s.o.Timeframes[name]; ok {
		return tf, candle.Timeframe{}, nil
	}
	want, err := candle.ParseTimeframe(name, s.zone)
	if err != nil {
		return tf, base, notFound("timeframe %q is not served (%v); use one of %s, or a whole multiple of one such as 3m, 2h, 6h, 12h, 3d", name, err, strings.Join(s.tfs, ", "))
	}
	if stored, ok := s.o.Timeframes[want.String()]; ok && stored.Loc.String() == want.Loc.String() {
		return stored, candle.Timeframe{}, nil // e.g. "01m" names the stored 1m
	}
	for _, n := range s.tfs { // finest first
		if b := s.o.Timeframes[n]; candle.Nests(b, want) == nil {
			return want, b, nil
		}
	}
	finest := s.o.Timeframes[s.tfs[0]]
	if windowMillis(want) < windowMillis(finest) {
		return tf, base, notFound("timeframe %q is not served: it is finer than the finest stored timeframe %s", name, s.tfs[0])
	}
	return tf, base, notFound("timeframe %q is not served: it is not a whole multiple of a stored timeframe (%s) aligned like them; use one such as 3m, 2h, 6h, 12h, 3d", name, strings.Join(s.tfs, ", "))
}

// servedNames lists the stored timeframes, then the suggested derived ones
// that can be built.
func (s *Server) servedNames() (stored, derived []string) {
	for _, n := range derivedSuggestions {
		if _, ok := s.o.Timeframes[n]; ok {
			continue
		}
		if _, base, err := s.timeframe(n); err == nil && base.N > 0 {
			derived = append(derived, n)
		}
	}
	return s.tfs, derived
}

// byLength sorts timeframe names shortest first.
func (s *Server) byLength(names []string) {
	slices.SortStableFunc(names, func(a, b string) int {
		ta, _, _ := s.timeframe(a)
		tb, _, _ := s.timeframe(b)
		return int(windowMillis(ta) - windowMillis(tb))
	})
}

// checkDerived refuses a page whose stored candles would exceed maxDerivedReads.
func checkDerived(tf, base candle.Timeframe, limit int) error {
	per := max(windowMillis(tf)/windowMillis(base), 1)
	if int64(limit+1)*per > maxDerivedReads {
		return bad("limit: a page of %d %s candles is built from up to %d %s candles; at most %d per request, so ask for limit ≤ %d (or a stored timeframe)",
			limit, tf, int64(limit+1)*per, base, maxDerivedReads, maxDerivedReads/per-1)
	}
	return nil
}

// derived answers q for a timeframe built from q.base: up to q.limit
// candles, whether more follow in q's direction, and openFrom (see
// candles). A built candle is final when every stored candle in it is and
// its window has ended by the server's clock.
func (s *Server) derived(ctx context.Context, q query) ([]candle.Candle, bool, int64, error) {
	tf, none := q.tf, int64(math.MaxInt64)
	// Derived windows opening in [from, to) are made of stored candles
	// opening in [lo, hi).
	lo := tf.Start(q.from)
	if lo < q.from {
		lo = tf.End(lo)
	}
	hi := tf.End(tf.Start(q.to - 1))
	if hi <= lo {
		return nil, false, none, nil
	}
	sub := func(from, to int64, limit int, desc bool) ([]candle.Candle, bool, int64, error) {
		return s.candles(ctx, query{symbol: q.symbol, tf: q.base, from: from, to: to, limit: limit, desc: desc})
	}
	// The stored candle nearest the page's start picks its first window;
	// the page spans limit+1 windows from there (one more tells whether
	// another page exists).
	edge, _, _, err := sub(lo, hi, 1, q.desc)
	if err != nil || len(edge) == 0 {
		return nil, false, none, err
	}
	start, end := tf.Start(edge[0].OpenTime), tf.End(tf.Start(edge[0].OpenTime))
	for i := 0; i < q.limit; i++ {
		if q.desc && start > lo {
			start = tf.Start(start - 1)
		} else if !q.desc && end < hi {
			end = tf.End(end)
		}
	}
	start, end = max(start, lo), min(end, hi)
	cs, truncated, subOpen, err := sub(start, end, maxDerivedReads, false)
	if err != nil {
		return nil, false, none, err
	}
	if truncated {
		return nil, false, none, bad("the page needs more than %d %s candles; ask for a smaller limit", maxDerivedReads, q.base)
	}
	out := combine(cs, tf)
	openFrom := none
	if subOpen != none {
		openFrom = tf.Start(subOpen)
	}
	now := s.o.Now().UnixMilli()
	for i := len(out) - 1; i >= 0 && out[i].CloseTime > now; i-- {
		openFrom = min(openFrom, out[i].OpenTime)
	}
	if q.desc {
		slices.Reverse(out)
	}
	if len(out) > q.limit {
		return out[:q.limit], true, openFrom, nil
	}
	// Windows without stored candles (a quiet key) made the page short:
	// more follow when anything is stored beyond it.
	var rest []candle.Candle
	if q.desc {
		rest, _, _, err = sub(lo, start, 1, true)
	} else {
		rest, _, _, err = sub(end, hi, 1, false)
	}
	return out, len(rest) > 0 && len(out) > 0, openFrom, err
}

// combine builds the candles of tf from consecutive stored candles
// (oldest first), one per window that has any. A built candle's rev is the
// sum of its candles' revs: it goes up whenever one of them is revised.
func combine(cs []candle.Candle, tf candle.Timeframe) []candle.Candle {
	var out []candle.Candle
	var acc candle.Candle
	nonGap, open := false, false
	flush := func() {
		if open {
			candle.FlattenGap(&acc, nonGap)
			out = append(out, acc)
		}
	}
	for i := range cs {
		o := tf.Start(cs[i].OpenTime)
		if !open || acc.OpenTime != o {
			flush()
			acc = candle.NewWindow(cs[i].Symbol, tf.String(), o, tf.End(o))
			nonGap, open = false, true
		}
		nonGap = candle.Merge(&acc, &cs[i], nonGap)
		acc.Rev += cs[i].Rev
	}
	flush()
	return out
}
