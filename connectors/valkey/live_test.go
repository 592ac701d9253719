package valkey

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// genTrades makes a deterministic stream: n trades round-robin over syms
// symbols, one every stepMs of event time starting at minute 29_000_000.
func genTrades(n, syms int, stepMs int64) []candle.Trade {
	qtys := []decimal.Decimal{decimal.MustParse("0.1"), decimal.MustParse("0.25"), decimal.MustParse("1.5")}
	out := make([]candle.Trade, n)
	base := 29_000_000 * minute
	for i := range out {
		s := i % syms
		out[i] = candle.Trade{
			Key:   fmt.Sprintf("SYM%03d", s),
			TS:    base + int64(i)*stepMs,
			Price: decimal.MustParse(fmt.Sprintf("%d.%02d", 100+s, (i*37)%100)),
			Qty:   qtys[i%len(qtys)],
			ID:    fmt.Sprint(i),
		}
	}
	return out
}

// processor stands in for the candle processor: exact 1m candles per symbol.
type processor struct {
	tf   candle.Timeframe
	open map[string]*candle.Candle
}

func newProcessor() *processor {
	tf, _ := candle.ParseTimeframe("1m", nil)
	return &processor{tf: tf, open: make(map[string]*candle.Candle)}
}

func (p *processor) apply(tr candle.Trade) candle.Candle {
	ot := p.tf.Start(tr.TS)
	c := p.open[tr.Key]
	if c == nil || c.OpenTime != ot {
		c = &candle.Candle{Symbol: tr.Key, Timeframe: "1m", OpenTime: ot, CloseTime: p.tf.End(ot),
			Open: tr.Price, High: tr.Price, Low: tr.Price}
		p.open[tr.Key] = c
	}
	if tr.Price.Cmp(c.High) > 0 {
		c.High = tr.Price
	}
	if tr.Price.Cmp(c.Low) < 0 {
		c.Low = tr.Price
	}
	c.Close = tr.Price
	c.Volume = c.Volume.AddDecimal(tr.Qty)
	c.QuoteVolume = c.QuoteVolume.Add(decimal.Product(tr.Price, tr.Qty))
	c.Trades++
	return *c
}

// TestRoundTripRatio replays 20k trades (100 symbols, 1000 trades/s of event
// time) through the coalesced pipeline, flushing at every 250ms of event time
// as the coalesce ticker would in real time, and through the per-trade Lua
// baseline. Round trips are counted, not timed, so the ratio is exact.
func TestRoundTripRatio(t *testing.T) {
	srv := startRedis(t)
	r := reader(t, srv.Addr)
	ctx := context.Background()
	trades := genTrades(20_000, 100, 1)

	s := newSink(t, srv.Addr, func(c *Config) { c.Coalesce = time.Hour; c.KeyPrefix = "k:" })
	p := newProcessor()
	const coalesceMs = 250
	next := trades[0].TS + coalesceMs
	for _, tr := range trades {
		if tr.TS >= next {
			if err := s.FlushActive(ctx); err != nil {
				t.Fatal(err)
			}
			next += coalesceMs
		}
		s.Active(p.apply(tr))
	}
	if err := s.FlushActive(ctx); err != nil {
		t.Fatal(err)
	}

	lua, err := NewLuaBaseline(ctx, Config{Addrs: []string{srv.Addr}, KeyPrefix: "lua:"})
	if err != nil {
		t.Fatal(err)
	}
	defer lua.Close()
	for _, tr := range trades {
		if err := lua.Trade(ctx, tr, p.tf); err != nil {
			t.Fatal(err)
		}
	}

	k, l := s.RoundTrips(), lua.RoundTrips()
	t.Logf("%d trades: kandle %d round trips (%.4f/trade), Lua %d (%.4f/trade), ratio %.0f×",
		len(trades), k, float64(k)/float64(len(trades)), l, float64(l)/float64(len(trades)), float64(l)/float64(k))
	if l != int64(len(trades)) || k == 0 || l < 20*k {
		t.Fatalf("round trips: kandle %d, Lua %d; want Lua ≥ 20× kandle", k, l)
	}
	// Both did the same work: the kandle hash is the exact candle, the Lua
	// one counted the same trades.
	for sym, c := range p.open {
		wantHash(t, hgetall(t, r, "k:candle:active:1m:"+sym), *c)
		if got := hgetall(t, r, "lua:candle:active:1m:"+sym)["t"]; got != fmt.Sprint(c.Trades) {
			t.Fatalf("Lua baseline %s: t = %s, want %d", sym, got, c.Trades)
		}
	}
}

// BenchmarkLiveStage runs the same 200k-trade stream (100 symbols, 1m) through
// kandle's coalesced pipeline (250ms and 0 coalesce) and the per-trade Lua
// baseline, reporting trades/s and Valkey round trips per trade side by side.
func BenchmarkLiveStage(b *testing.B) {
	srv := startRedis(b)
	trades := genTrades(200_000, 100, 3) // 10 minutes of event time
	ctx := context.Background()
	for _, coalesce := range []time.Duration{250 * time.Millisecond, 0} {
		b.Run(fmt.Sprintf("kandle/coalesce=%v", coalesce), func(b *testing.B) {
			s := newSink(b, srv.Addr, func(c *Config) { c.Coalesce = coalesce; c.KeyPrefix = "k:" })
			b.ResetTimer()
			for range b.N {
				p := newProcessor()
				for _, tr := range trades {
					s.Active(p.apply(tr))
				}
				if err := s.FlushActive(ctx); err != nil { // everything is in Valkey
					b.Fatal(err)
				}
			}
			report(b, len(trades)*b.N, s.RoundTrips())
		})
	}
	b.Run("lua-per-trade", func(b *testing.B) {
		lua, err := NewLuaBaseline(ctx, Config{Addrs: []string{srv.Addr}, KeyPrefix: "lua:"})
		if err != nil {
			b.Fatal(err)
		}
		defer lua.Close()
		tf, _ := candle.ParseTimeframe("1m", nil)
		b.ResetTimer()
		for range b.N {
			for _, tr := range trades {
				if err := lua.Trade(ctx, tr, tf); err != nil {
					b.Fatal(err)
				}
			}
		}
		report(b, len(trades)*b.N, lua.RoundTrips())
	})
}

func report(b *testing.B, trades int, trips int64) {
	b.ReportMetric(float64(trades)/b.Elapsed().Seconds(), "trades/s")
	b.ReportMetric(float64(trips)/float64(trades), "roundtrips/trade")
}

// BenchmarkValkeyWrite measures final candles through Write+Flush (batches of
// 500, 1000 symbols), each batch a WATCH/MULTI/EXEC compare-and-set.
func BenchmarkValkeyWrite(b *testing.B) {
	srv := startRedis(b)
	s := newSink(b, srv.Addr, nil)
	ctx := context.Background()
	batch := make([]candle.Candle, 0, 500)
	b.ResetTimer()
	for i := range b.N {
		batch = append(batch, mk(fmt.Sprintf("SYM%04d", i%1000), int64(i/1000), "100.5", "101", "99.25", "100", "12.5", "1250.5", 42))
		if len(batch) == cap(batch) || i == b.N-1 {
			if err := s.Write(ctx, batch); err != nil {
				b.Fatal(err)
			}
			if err := s.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "candles/s")
}

// A flush of more keys than one pipeline holds is sent as several at once.
// Every key keeps all its pending windows in one pipeline, so a late update
// of an older window, pending beside the newer one, is published but never
// lands in the hash, whichever pipeline Valkey runs first.
func TestActivePipelinesInFlightKeepNewest(t *testing.T) {
	srv := startRedis(t)
	r := reader(t, srv.Addr)
	s := newSink(t, srv.Addr, func(c *Config) { c.Coalesce = time.Hour })
	ctx := context.Background()
	const keys = 3 * maxPipeline
	for k := range keys {
		sym := fmt.Sprintf("P%05d", k)
		newer := mk(sym, 11, "2", "2", "2", "2", "2", "4", 2)
		older := mk(sym, 10, "1", "1", "1", "1", "1", "1", 1)
		if k%2 == 0 {
			s.Active(newer)
			s.Active(older) // a late trade into the still-open older window
		} else {
			s.Active(older)
			s.Active(newer)
		}
	}
	t0 := s.RoundTrips()
	if err := s.FlushActive(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.RoundTrips() - t0; n < 2 {
		t.Fatalf("%d round trips for %d candles, want several pipelines", n, 2*keys)
	}
	for k := range keys {
		sym := fmt.Sprintf("P%05d", k)
		wantHash(t, hgetall(t, r, "candle:active:1m:"+sym), mk(sym, 11, "2", "2", "2", "2", "2", "4", 2))
	}
	if got := counter(s.m.stale); got != keys {
		t.Fatalf("stale_skipped_total = %v, want %d (each key's older window published only)", got, keys)
	}
	if got := counter(s.m.written.WithLabelValues(kindActive)); got != 2*keys {
		t.Fatalf("written_total{active} = %v, want %d", got, 2*keys)
	}
}
