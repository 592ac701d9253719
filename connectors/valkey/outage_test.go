package valkey

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kandle/kandle/internal/testkit"
	"github.com/valkey-io/valkey-go"
)

// restartRedis starts a fresh redis-server on addr (after the old one stopped).
func restartRedis(t *testing.T, addr string) *testkit.Service {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	ready := func() error {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err
	}
	return testkit.Start(t, "redis-server-restarted", addr, ready, "redis-server",
		[]string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no", "--dir", t.TempDir()})
}

func TestOutage(t *testing.T) {
	srv := startRedis(t)
	s := newSink(t, srv.Addr, func(c *Config) { c.Coalesce = 10 * time.Millisecond; c.Timeout = time.Second })
	r := reader(t, srv.Addr)
	ctx := context.Background()

	s.Active(mk("BTC", 1, "1", "1", "1", "1", "1", "1", 1))
	waitFor(t, 5*time.Second, func() bool { return len(hgetall(t, r, "candle:active:1m:BTC")) > 0 }, "first active update")

	srv.Stop()
	errsBefore := counter(s.m.errors.WithLabelValues(kindActive))
	var slowest time.Duration
	i := 0
	activeDuringOutage := func() {
		for j := 0; j < 50; j++ {
			i++
			start := time.Now()
			s.Active(mk("BTC", 1, "1", "2", "1", itoa(i), itoa(i), "1", int64(i)))
			slowest = max(slowest, time.Since(start))
		}
	}
	waitFor(t, 10*time.Second, func() bool {
		activeDuringOutage()
		return counter(s.m.errors.WithLabelValues(kindActive)) > errsBefore+2
	}, "failed active flushes while the server is down")

	// A final candle written during the outage: Flush keeps retrying.
	final := mk("ETH", 7, "3000", "3100", "2900", "3050", "2", "6100", 2)
	flushed := make(chan error, 1)
	go func() {
		if err := s.Write(ctx, []candle1{final}); err != nil {
			flushed <- err
			return
		}
		flushed <- s.Flush(ctx)
	}()
	waitFor(t, 10*time.Second, func() bool {
		activeDuringOutage()
		return counter(s.m.retries.WithLabelValues(kindFinal)) >= 3
	}, "final write retries")
	select {
	case err := <-flushed:
		t.Fatalf("Flush returned %v while the server was down", err)
	default:
	}
	if slowest > 50*time.Millisecond {
		t.Fatalf("Active blocked for %v during the outage", slowest)
	}
	if counter(s.m.dropped) == 0 {
		t.Fatal("updates replaced during the outage were not counted as dropped")
	}

	// Same port, new (empty) server: the final lands and Active resumes.
	restartRedis(t, srv.Addr)
	select {
	case err := <-flushed:
		if err != nil {
			t.Fatalf("Flush after the server came back: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Flush did not finish after the server came back")
	}
	r2 := reader(t, srv.Addr)
	wantHash(t, hgetall(t, r2, "candle:active:1m:ETH"), final)
	// The newest update from the outage was kept pending (one per key) and
	// arrives without another Active call.
	last := mk("BTC", 1, "1", "2", "1", itoa(i), itoa(i), "1", int64(i))
	waitFor(t, 10*time.Second, func() bool {
		return hgetall(t, r2, "candle:active:1m:BTC")["t"] == itoa(i)
	}, "the pending active candle after recovery")
	wantHash(t, hgetall(t, r2, "candle:active:1m:BTC"), last)
	next := mk("BTC", 2, "9", "9", "9", "9", "9", "81", 1)
	s.Active(next)
	waitFor(t, 10*time.Second, func() bool {
		return hgetall(t, r2, "candle:active:1m:BTC")["open_time"] == fmt.Sprint(next.OpenTime)
	}, "a new active update after recovery")
}

func TestFlushCancelledKeepsBuffer(t *testing.T) {
	srv := startRedis(t)
	s := newSink(t, srv.Addr, func(c *Config) { c.Timeout = 200 * time.Millisecond })
	srv.Stop()
	c := mk("XRP", 3, "0.5", "0.5", "0.5", "0.5", "1", "0.5", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := s.Write(ctx, []candle1{c}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err == nil {
		t.Fatal("Flush succeeded with the server down")
	}
	restartRedis(t, srv.Addr)
	if err := s.Flush(context.Background()); err != nil {
		t.Fatalf("second Flush: %v", err)
	}
	wantHash(t, hgetall(t, reader(t, srv.Addr), "candle:active:1m:XRP"), c)
}

// Finals of the same keys written at once by two sinks (a redelivery from
// another process) while the live writer moves some keys to a newer
// window, each sink with several script calls in flight: every hash ends
// at the newest window anyone wrote, never an older one, and each sink's
// finals of a key are published in the order it wrote them.
func TestConcurrentFinalsNeverGoBack(t *testing.T) {
	srv := startRedis(t)
	r := reader(t, srv.Addr)
	ctx := context.Background()
	const keys, windows = 3 * maxChunk * finalsInFlight / 2, 4 // several chunks per flush
	sym := func(k int) string { return fmt.Sprintf("C%04d", k) }
	fin := func(k, w int, who int64) candle1 {
		return mk(sym(k), int64(100+w), "1", "2", "0.5", "1.5", "3", "4.5", who)
	}

	// Every message on the candle channels, in the order Valkey sent them.
	var mu sync.Mutex
	var got []pubMsg
	sctx, stop := context.WithCancel(ctx)
	subDone := make(chan struct{})
	go func() {
		defer close(subDone)
		_ = r.Receive(sctx, r.B().Psubscribe().Pattern("pub:candle:1m:*").Build(), func(m valkey.PubSubMessage) {
			var p pubMsg
			if err := json.Unmarshal([]byte(m.Message), &p); err != nil {
				t.Errorf("bad message %q: %v", m.Message, err)
				return
			}
			mu.Lock()
			got = append(got, p)
			mu.Unlock()
		})
	}()
	defer func() { stop(); <-subDone }()
	waitFor(t, 5*time.Second, func() bool {
		n, err := r.Do(ctx, r.B().PubsubNumpat().Build()).AsInt64()
		return err == nil && n > 0
	}, "the pattern subscription")

	a := newSink(t, srv.Addr, func(c *Config) { c.Coalesce = time.Hour })
	b := newSink(t, srv.Addr, nil)
	var wg sync.WaitGroup
	// a writes every window of every key in one flush, window after window:
	// each key's windows are spread over the buffer, and the flush still
	// publishes them in order. b redelivers them newest first, a window per
	// flush.
	wg.Add(2)
	go func() {
		defer wg.Done()
		var batch []candle1
		for w := range windows {
			for k := range keys {
				batch = append(batch, fin(k, w, 1))
			}
		}
		if err := a.Write(ctx, batch); err != nil {
			t.Error(err)
		} else if err := a.Flush(ctx); err != nil {
			t.Error(err)
		}
	}()
	go func() {
		defer wg.Done()
		for w := windows - 1; w >= 0; w-- {
			batch := make([]candle1, 0, keys)
			for k := range keys {
				batch = append(batch, fin(k, w, 2))
			}
			if err := b.Write(ctx, batch); err != nil {
				t.Error(err)
				return
			}
			if err := b.Flush(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for k := 0; k < keys; k += 2 { // the live writer is a window ahead on even keys
		a.Active(fin(k, windows, 3))
	}
	if err := a.FlushActive(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	for k := range keys {
		want := fin(k, windows-1, 0)
		if k%2 == 0 {
			want = fin(k, windows, 3)
		}
		h := hgetall(t, r, "candle:active:1m:"+sym(k))
		if h["open_time"] != fmt.Sprint(want.OpenTime) || (k%2 == 0 && h["t"] != "3") {
			t.Fatalf("%s: hash %v, want window %d", sym(k), h, want.OpenTime)
		}
	}
	if a.PeakFinalsInFlight() < 2 && b.PeakFinalsInFlight() < 2 {
		t.Errorf("peak requests in flight %d and %d: want several chunks in flight", a.PeakFinalsInFlight(), b.PeakFinalsInFlight())
	}
	waitFor(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 2*keys*windows+keys/2
	}, "every final and live message")
	mu.Lock()
	defer mu.Unlock()
	last := map[string]int64{} // per sink and key: the last window published
	for _, m := range got {
		if !m.Final {
			continue
		}
		id := fmt.Sprint(m.Trades, m.Symbol)
		if prev, ok := last[id]; ok && (m.Trades == 1) != (m.OpenTime > prev) {
			t.Fatalf("sink %d published %s window %d after %d: out of the order written", m.Trades, m.Symbol, m.OpenTime, prev)
		}
		last[id] = m.OpenTime
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	srv := startRedis(t)
	cfg := DefaultConfig(srv.Addr)
	cfg.Coalesce = 5 * time.Millisecond
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Active(mk("A", 1, "1", "1", "1", "1", "1", "1", 1))
	srv.Stop() // close during an outage: the loop must still exit
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_ = s.Close(ctx)
	waitFor(t, 5*time.Second, func() bool {
		buf := make([]byte, 1<<20)
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "connectors/valkey.(") // the sink, its flush goroutine and senders
	}, "the sink's goroutines to exit")
	s.Active(mk("A", 2, "1", "1", "1", "1", "1", "1", 1)) // after Close: dropped, no panic
	if err := s.Write(context.Background(), nil); err != ErrClosed {
		t.Fatalf("Write after Close: %v", err)
	}
}

// However long Valkey stays down, the live updates waiting for it are at
// most one per key (the newest window's): hours of one-minute windows for
// a few symbols never pile up. When it is back, each key's newest window is
// what lands in its hash.
func TestOutageHoldsOneWindowPerKey(t *testing.T) {
	srv := startRedis(t)
	s := newSink(t, srv.Addr, func(c *Config) { c.Coalesce = 10 * time.Millisecond; c.Timeout = 500 * time.Millisecond })
	srv.Stop()
	syms := []string{"BTC", "ETH", "SOL"}
	s.Active(mk("BTC", 1, "1", "1", "1", "1", "1", "1", 1))
	waitFor(t, 10*time.Second, func() bool { return s.down.Load() }, "the sink noticing the outage")
	const windows = 600 // ten hours of 1m windows
	for n := int64(2); n <= windows; n++ {
		for _, sym := range syms {
			s.Active(mk(sym, n, "1", "2", "1", itoa(int(n)), "1", "1", n))
			s.Active(mk(sym, n, "1", "2", "1", itoa(int(n)), "2", "2", n)) // a second update of the same window
		}
		held := len(s.pendingWindows())
		if held > 2*len(syms) { // one per key, plus what a flush in progress may put back
			t.Fatalf("after %d windows of the outage %d active candles wait for Valkey; want at most one per key (%d)", n, held, len(syms))
		}
	}
	if d := counter(s.m.dropped); d < float64(windows) {
		t.Fatalf("active_dropped_total = %v after replacing %d windows during the outage", d, windows)
	}
	for _, w := range s.pendingWindows() {
		if w.open != windows*minute {
			t.Errorf("pending holds window %d of %s, want only the newest (%d)", w.open, w.sym, windows*minute)
		}
	}
}

// A replay of a long history writes many finals of one key in one flush:
// they stay in one chunk (never split over chunks in flight), so they are
// published in the order written and the hash ends at the newest. More
// than Lua's unpack takes at once (~8,000) still go in that one chunk.
func TestFinalsOfOneKeyPublishedInOrder(t *testing.T) {
	srv := startRedis(t)
	r := reader(t, srv.Addr)
	s := newSink(t, srv.Addr, nil)
	sub := subscribe(t, r, "pub:candle:1m:ONE")
	ctx := context.Background()
	const n = 9000
	batch := make([]candle1, 0, n+finalsInFlight*maxChunk)
	for w := range n {
		batch = append(batch, mk("ONE", int64(w), "1", "1", "1", "1", "1", "1", int64(w+1)))
	}
	for k := range finalsInFlight * maxChunk { // other keys, so there are chunks to run beside it
		batch = append(batch, mk("OTHER"+itoa(k), 1, "1", "1", "1", "1", "1", "1", 1))
	}
	if err := s.Write(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for w := range n {
		if m := recv(t, sub); m.OpenTime != int64(w)*minute {
			t.Fatalf("message %d is window %d, want %d: published out of the order written", w, m.OpenTime/minute, w)
		}
	}
	wantHash(t, hgetall(t, r, "candle:active:1m:ONE"), batch[n-1])
}
