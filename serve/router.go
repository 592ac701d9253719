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

// candles answers q: up to q.limit candles stitched from the stores,
// whether more follow in q's direction, and openFrom: the candles opening
// at or after it are not final (math.MaxInt64 when every one is).
func (s *Server) candles(ctx context.Context, q query) (cs []candle.Candle, more bool, openFrom int64, err error) {
	if q.base.N > 0 {
		return s.derived(ctx, q)
	}
	if q.limit <= 0 {
		return nil, false, math.MaxInt64, nil
	}
	want := q.limit + 1 // one more tells whether another page exists
	b := s.split()
	type segment struct {
		h        History
		name     string
		from, to int64
	}
	segs := []segment{
		{s.o.Cold, "cold", q.from, min(q.to, b)},
		{s.o.Hot, "hot", max(q.from, b), q.to},
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
		if sg.h == nil || sg.to <= sg.from || len(out) >= want+1 {
			continue
		}
		// +1: the open window may repeat the newest stored candle.
		cs, err := sg.h.Page(ctx, q.symbol, q.tf, sg.from, sg.to, want+1-len(out), q.desc)
		if err != nil {
			return nil, false, 0, fmt.Errorf("%s store: %w", sg.name, err)
		}
		out = append(out, cs...)
	}
	openFrom = math.MaxInt64
	if open != nil {
		// The open window is not final, unless a stored final of it wins.
		if !slices.ContainsFunc(out, func(c candle.Candle) bool { return c.OpenTime == open.OpenTime }) {
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
	// One candle per open_time; the stored final (earlier in out) wins
	// over the active hash.
	out = slices.CompactFunc(out, func(a, b candle.Candle) bool { return a.OpenTime == b.OpenTime })
	if q.desc {
		slices.Reverse(out)
	}
	more = len(out) > q.limit
	if more {
		out = out[:q.limit]
	}
	return out, more, openFrom, nil
}
