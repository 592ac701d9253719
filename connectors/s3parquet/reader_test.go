package s3parquet

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
)

// TestReaderRanges writes candles through the sink (small row groups, so
// row-group skipping matters) and reads many ranges back, both directions,
// with and without limits, from an S3 lake and a file lake.
func TestReaderRanges(t *testing.T) {
	ctx := context.Background()
	f := newFakeS3(t, "lake")
	all := gen("BTC/USDT", "ETH")
	for _, lake := range []struct {
		name string
		cfg  Config
	}{{"s3", f.config("lake/p")}, {"file", Config{URL: "file://" + t.TempDir()}}} {
		t.Run(lake.name, func(t *testing.T) {
			cfg := lake.cfg
			cfg.RowGroupRows = 100
			s, err := New(ctx, cfg, WithLogger(quietLogger()))
			if err != nil {
				t.Fatal(err)
			}
			writeBatches(t, s, all, 500)
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			r, err := NewReader(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			tf, _ := candle.ParseTimeframe("1m", nil)
			var series []candle.Candle
			for _, c := range all {
				if c.Symbol == "BTC/USDT" && c.Timeframe == "1m" {
					series = append(series, c)
				}
			}
			slices.SortFunc(series, func(a, b candle.Candle) int { return int(a.OpenTime - b.OpenTime) })
			first, last := series[0].OpenTime, series[len(series)-1].OpenTime
			ranges := [][2]int64{
				{first, last + 60_000},                       // everything, across two midnights
				{first - 86_400_000, first + 5*60_000},       // starts on a day without objects
				{first + 61*60_000, first + 3*60*60_000 + 7}, // ragged ends
				{last, last + 86_400_000*2},                  // past the newest object
				{first + 30*60_000, first + 30*60_000 + 1},   // one candle
			}
			for _, rg := range ranges {
				var want []candle.Candle
				for _, c := range series {
					if c.OpenTime >= rg[0] && c.OpenTime < rg[1] {
						want = append(want, c)
					}
				}
				for _, limit := range []int{0, 1, 7, 1000} {
					for _, desc := range []bool{false, true} {
						got, err := r.Candles(ctx, "BTC/USDT", tf, rg[0], rg[1], limit, desc)
						if err != nil {
							t.Fatal(err)
						}
						exp := slices.Clone(want)
						if desc {
							slices.Reverse(exp)
						}
						if limit > 0 && len(exp) > limit {
							exp = exp[:limit]
						}
						if !slices.EqualFunc(got, exp, func(a, b candle.Candle) bool { return a.Equal(&b) }) {
							t.Fatalf("range %v limit %d desc %v: got %d candles, want %d\ngot  %v\nwant %v", rg, limit, desc, len(got), len(exp), head(got), head(exp))
						}
					}
				}
			}
			// A short range reads a fraction of its object: only its row
			// group and the candle columns.
			reads0, bytes0 := r.ReadStats()
			at := time.UnixMilli(first).UTC().Add(4 * time.Hour).UnixMilli()
			if _, err := r.Candles(ctx, "BTC/USDT", tf, at, at+10*60_000, 0, false); err != nil {
				t.Fatal(err)
			}
			reads1, bytes1 := r.ReadStats()
			size, err := r.ObjectSize(ctx, "BTC/USDT", "1m", at)
			if err != nil || size == 0 {
				t.Fatalf("object size: %d, %v", size, err)
			}
			if got := bytes1 - bytes0; got <= 0 || got*2 > size {
				t.Errorf("a 10-candle range read %d bytes in %d reads of a %d-byte object; want under half", got, reads1-reads0, size)
			}
		})
	}
}

func head(cs []candle.Candle) []int64 {
	var out []int64
	for i, c := range cs {
		if i == 5 {
			break
		}
		out = append(out, c.OpenTime)
	}
	return out
}
