package dynamodb

import (
	"context"
	"fmt"
	"sort"

	"github.com/kandle/kandle/candle"
)

// Page returns at most limit candles of symbol and timeframe with open_time
// in [from, to): the oldest ones, oldest first, or with newestFirst the
// newest ones, newest first. Each shard's partition is read with one Query
// in that direction with Limit=limit, so paging backwards through history
// (a chart scrolling left) costs one short Query per page, not a scan of
// the range. limit <= 0 reads the whole range.
func (r *Reader) Page(ctx context.Context, symbol, tf string, from, to int64, limit int, newestFirst bool) ([]candle.Candle, error) {
	if to <= from {
		return nil, nil
	}
	pks, err := r.partitions(symbol, tf)
	if err != nil {
		return nil, err
	}
	var out []candle.Candle
	for _, pk := range pks {
		items, err := r.query(ctx, r.keyCond(pk, &[2]int64{from, to}), !newestFirst, int32(max(limit, 0)))
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			c, err := itemCandle(it)
			if err != nil {
				return nil, fmt.Errorf("dynamodb candles %s %s: %w", symbol, tf, err)
			}
			if c.OpenTime >= from && c.OpenTime < to {
				out = append(out, c)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if newestFirst {
			return out[i].OpenTime > out[j].OpenTime
		}
		return out[i].OpenTime < out[j].OpenTime
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
