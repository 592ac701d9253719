package serve

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/kandle/kandle/candle"
)

// query is one validated candle request: open_time in [from, to), at most
// limit candles, newest first when desc.
type query struct {
	symbol string
	tf     candle.Timeframe
	base   candle.Timeframe // set: tf is built at query time from this stored timeframe
	from   int64
	to     int64
	limit  int
	desc   bool
}

// checkDerived refuses a page of a built timeframe that would read too many
// stored candles.
func (q query) checkDerived() error {
	if q.base.N == 0 {
		return nil
	}
	return checkDerived(q.tf, q.base, q.limit)
}

// split returns the time before which candles come from the cold store:
// now - hot_horizon with both stores, -inf with only a hot store (it holds
// everything), +inf with only a cold one.
func (s *Server) split() int64 {
	switch {
	case s.o.Hot != nil && s.o.Cold != nil && s.o.Config.HotHorizon > 0:
		return s.o.Now().Add(-s.o.Config.HotHorizon).UnixMilli()
	case s.o.Hot != nil:
		return math.MinInt64
	default:
		return math.MaxInt64
	}
}

// overlap is how far before the split the hot store is read too: the
// revision horizon (Options.ReviseWithin) when both stores are split by
// hot_horizon. A window revised shortly before it left the hot range may
// not have reached the cold store yet (or the other way round); reading
// both there lets the higher rev win.
func (s *Server) overlap() int64 {
	if s.o.Hot != nil && s.o.Cold != nil && s.o.Config.HotHorizon > 0 {
		return s.o.ReviseWithin.Milliseconds()
	}
	return 0
}

// candles answers q: up to q.limit candles stitched from the stores,
// whether more follow in q's direction, and openFrom: the candles opening
// at or after it are not final (math.MaxInt64 when every one is). Where
// several stores hold a window (the open window and a stored final, or
// hot and cold near the split), the highest rev wins, and among equal
// revs the stored final.
func (s *Server) candles(ctx context.Context, q query) (cs []candle.Candle, more bool, openFrom int64, err error) {
	if q.base.N > 0 {
		return s.derived(ctx, q)
	}
	if q.limit <= 0 {
		return nil, false, math.MaxInt64, nil
	}
	want := q.limit + 1 // one more tells whether another page exists
	b, ov := s.split(), s.overlap()
	type segment struct {
		h        History
		name     string
		from, to int64
	}
	segs := []segment{
		{s.o.Cold, "cold", q.from, min(q.to, b)},
		{s.o.Hot, "hot", max(q.from, b-ov), q.to},
	}
	if q.desc {
		slices.Reverse(segs)
	}
	var out []candle.Candle
	// The open window first when reading newest first: it is the newest.
	var open *candle.Candle
	if s.o.Live != nil {
		c, ok, err := s.o.Live.OpenCandle(ctx, q.symbol, q.tf.String())
		if err != nil {
			return nil, false, 0, fmt.Errorf("live store: %w", err)
		}
		if ok && c.OpenTime >= q.from && c.OpenTime < q.to {
			open = &c
		}
	}
	for _, sg := range segs {
		if sg.h == nil || sg.to <= sg.from || (len(out) >= want+1 && ov == 0) {
			continue // with an overlap both segments may hold the newest rev
		}
		// +1: the open window may repeat the newest stored candle. With an
		// overlap, each segment's own first want+1: the two may repeat
		// each other's.
		n := want + 1 - len(out)
		if ov > 0 {
			n = want + 1
		}
		cs, err := sg.h.Page(ctx, q.symbol, q.tf, sg.from, sg.to, n, q.desc)
		if err != nil {
			return nil, false, 0, fmt.Errorf("%s store: %w", sg.name, err)
		}
		out = append(out, cs...)
	}
	openFrom = math.MaxInt64
	if open != nil {
		// The open window is not final, unless a stored final of it
		// exists or it is a revision (only a final is revised).
		if open.Rev == 0 && !slices.ContainsFunc(out, func(c candle.Candle) bool { return c.OpenTime == open.OpenTime }) {
			openFrom = open.OpenTime
		}
		out = append(out, *open)
	}
	slices.SortStableFunc(out, func(a, b candle.Candle) int {
		switch {
		case a.OpenTime < b.OpenTime:
			return -1
		case a.OpenTime > b.OpenTime:
			return 1
		}
		return 0
	})
	out = newestRevs(out)
	if q.desc {
		slices.Reverse(out)
	}
	more = len(out) > q.limit
	if more {
		out = out[:q.limit]
	}
	return out, more, openFrom, nil
}

// newestRevs keeps one candle per open_time of out (sorted by open_time,
// stably): the highest rev, and among equal revs the first (a stored final
// before the open window's candle).
func newestRevs(out []candle.Candle) []candle.Candle {
	n := 0
	for i := range out {
		switch {
		case n == 0 || out[n-1].OpenTime != out[i].OpenTime:
			out[n] = out[i]
			n++
		case out[i].Rev > out[n-1].Rev:
			out[n-1] = out[i]
		}
	}
	clear(out[n:])
	return out[:n]
}
