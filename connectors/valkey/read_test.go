package valkey

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/internal/testkit"
)

// TestReader reads back what the sink wrote: the active hash, the symbols,
// and pub/sub messages (open and final) on one subscription per channel,
// subscribed again after the server restarts.
func TestReader(t *testing.T) {
	srv := testkit.Redis(t)
	s := newSink(t, srv.Addr, func(c *Config) { c.Coalesce = 0 })
	ctx := context.Background()
	r, err := NewReader(ctx, DefaultConfig(srv.Addr), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := candle.Candle{Symbol: "BTC/USDT", Timeframe: "1m", OpenTime: 10 * minute, CloseTime: 11 * minute,
		Open: decimal.MustParse("1.5"), High: decimal.MustParse("2.000000000000000001"), Low: decimal.MustParse("1"),
		Close: decimal.MustParse("1.25"), Volume: decimal.MustParseSum("0.3"), QuoteVolume: decimal.MustParseSum("0.45"), Trades: 3,
		Taker: true, TakerBuyVolume: decimal.MustParseSum("0.1"), TakerBuyQuoteVolume: decimal.MustParseSum("0.15"), FirstTradeID: "7", LastTradeID: "9"}
	s.Active(c)
	if err := s.FlushActive(ctx); err != nil {
		t.Fatal(err)
	}
	got, ok, err := r.Active(ctx, "BTC/USDT", "1m")
	if err != nil || !ok || got != c {
		t.Fatalf("active: %+v %v %v; want %+v", got, ok, err, c)
	}
	if _, ok, err := r.Active(ctx, "BTC/USDT", "5m"); ok || err != nil {
		t.Fatalf("absent series: %v %v", ok, err)
	}
	if syms, err := r.Symbols(ctx); err != nil || !slices.Equal(syms, []string{"BTC/USDT"}) {
		t.Fatalf("symbols: %v %v", syms, err)
	}

	var mu sync.Mutex
	var msgs []Message
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = r.Run(rctx, func(m Message) { mu.Lock(); msgs = append(msgs, m); mu.Unlock() })
	})
	defer func() { cancel(); wg.Wait() }()
	if err := r.Subscribe(ctx, "BTC/USDT", "1m"); err != nil {
		t.Fatal(err)
	}
	check := s.client // a plain client of the same server
	waitFor(t, 10*time.Second, func() bool {
		n, err := check.Do(ctx, check.B().PubsubNumsub().Channel("pub:candle:1m:BTC/USDT").Build()).AsIntMap()
		return err == nil && n["pub:candle:1m:BTC/USDT"] == 1
	}, "one subscriber on the channel")
	next := c
	next.Trades, next.Close, next.LastTradeID = 4, decimal.MustParse("1.75"), "10"
	next.TakerBuyVolume, next.TakerBuyQuoteVolume = decimal.MustParseSum("0.2"), decimal.MustParseSum("0.325")
	s.Active(next)
	// The live and the final path are independent (the sink does not order
	// a live update before a final written after it), so the final is
	// written once the live update is out.
	waitFor(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(msgs) >= 1
	}, "the open update")
	if err := s.Write(ctx, []candle.Candle{next}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(msgs) >= 2
	}, "the open and the final update")
	mu.Lock()
	for _, m := range msgs[:2] {
		if m.Candle != next {
			t.Errorf("message %s: %+v", m.Raw, m.Candle)
		}
	}
	if msgs[0].Final || !msgs[len(msgs)-1].Final {
		t.Errorf("final flags: %v, %v", msgs[0].Final, msgs[len(msgs)-1].Final)
	}
	mu.Unlock()
	// The final's hash (written by the finals script) holds the taker
	// volumes and ids; a later window without them leaves none behind.
	if got, ok, err := r.Active(ctx, "BTC/USDT", "1m"); err != nil || !ok || got != next {
		t.Fatalf("active after the final: %+v %v %v; want %+v", got, ok, err, next)
	}
	plain := candle.Candle{Symbol: "BTC/USDT", Timeframe: "1m", OpenTime: 11 * minute, CloseTime: 12 * minute,
		Open: decimal.MustParse("2"), High: decimal.MustParse("2"), Low: decimal.MustParse("2"), Close: decimal.MustParse("2"),
		Volume: decimal.MustParseSum("1"), QuoteVolume: decimal.MustParseSum("2"), Trades: 1}
	for _, final := range []bool{false, true} {
		if final {
			err = s.Write(ctx, []candle.Candle{plain})
			if err == nil {
				err = s.Flush(ctx)
			}
		} else {
			s.Active(plain)
			err = s.FlushActive(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got, ok, err := r.Active(ctx, "BTC/USDT", "1m"); err != nil || !ok || got != plain {
			t.Fatalf("active (final %v) of a candle without taker volumes or ids: %+v %v %v; want %+v", final, got, ok, err, plain)
		}
	}
	// The server goes away and comes back: Run reconnects and subscribes
	// the set again, so updates flow without anyone asking.
	srv.Stop()
	restartRedis(t, srv.Addr)
	waitFor(t, 30*time.Second, func() bool {
		n, err := check.Do(ctx, check.B().PubsubNumsub().Channel("pub:candle:1m:BTC/USDT").Build()).AsIntMap()
		return err == nil && n["pub:candle:1m:BTC/USDT"] == 1
	}, "the subscription back after the restart")
	mu.Lock()
	before := len(msgs)
	mu.Unlock()
	later := next
	later.OpenTime, later.CloseTime = next.CloseTime, next.CloseTime+minute
	s.Active(later)
	waitFor(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(msgs) > before && msgs[len(msgs)-1].Candle == later
	}, "an update after the restart")
	if err := r.Unsubscribe(ctx, "BTC/USDT", "1m"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		n, err := check.Do(ctx, check.B().PubsubNumsub().Channel("pub:candle:1m:BTC/USDT").Build()).AsIntMap()
		return err == nil && n["pub:candle:1m:BTC/USDT"] == 0
	}, "no subscriber left")
}

// Subscribe returns only once the server has the subscription, also when it
// is called before Run's connection is up: a message published right after
// it returns is delivered (the stream reads its snapshot then, and a final
// published in a gap would be lost to that client).
func TestSubscribeReturnsOnceSubscribed(t *testing.T) {
	srv := testkit.Redis(t)
	s := newSink(t, srv.Addr, func(c *Config) { c.Coalesce = 0 })
	ctx := context.Background()
	for round := range 5 {
		r, err := NewReader(ctx, DefaultConfig(srv.Addr), quiet)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan Message, 16)
		rctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { _ = r.Run(rctx, func(m Message) { got <- m }) })
		// Round 0 subscribes before Run can have connected; later rounds
		// subscribe a second channel on the live connection too.
		sym := "BTC/USDT"
		if err := r.Subscribe(ctx, sym, "1m"); err != nil {
			t.Fatal(err)
		}
		if round > 0 {
			sym = "ETH/USDT"
			if err := r.Subscribe(ctx, sym, "1m"); err != nil {
				t.Fatal(err)
			}
		}
		ch := "pub:candle:1m:" + sym
		n, err := s.client.Do(ctx, s.client.B().PubsubNumsub().Channel(ch).Build()).AsIntMap()
		if err != nil || n[ch] != 1 {
			t.Fatalf("round %d: right after Subscribe returned, %s has %d subscribers (%v); want 1", round, ch, n[ch], err)
		}
		c := candle.Candle{Symbol: sym, Timeframe: "1m", OpenTime: 10 * minute, CloseTime: 11 * minute,
			Open: decimal.MustParse("1"), High: decimal.MustParse("1"), Low: decimal.MustParse("1"), Close: decimal.MustParse("1"),
			Volume: decimal.MustParseSum("1"), QuoteVolume: decimal.MustParseSum("1"), Trades: int64(round + 1)}
		s.Active(c)
		if err := s.FlushActive(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			if m.Candle.Symbol != sym || m.Candle.Trades != c.Trades {
				t.Fatalf("round %d: got %s", round, m.Raw)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the update published right after Subscribe never arrived", round)
		}
		cancel()
		wg.Wait()
		r.Close()
	}
}
