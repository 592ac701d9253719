package valkey

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/internal/testkit"
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

func TestAbortedTransactionIsRetried(t *testing.T) {
	srv := startRedis(t)
	r := reader(t, srv.Addr)
	s := newSink(t, srv.Addr, nil)
	ctx := context.Background()
	newer := mk("DOT", 9, "7", "7", "7", "7", "1", "7", 1)
	// Between the read and EXEC, another writer stores a newer window.
	interfered := 0
	s.beforeExec = func() {
		if interfered++; interfered == 1 {
			if err := r.Do(ctx, hset(r.B(), "candle:active:1m:DOT", &newer)).Error(); err != nil {
				t.Error(err)
			}
		}
	}
	older := mk("DOT", 8, "6", "6", "6", "6", "1", "6", 1)
	if err := s.Write(ctx, []candle1{older}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if interfered != 2 || counter(s.m.retries.WithLabelValues(kindFinal)) != 1 {
		t.Fatalf("transactions: %d, retries %v; want an abort and one retry", interfered,
			counter(s.m.retries.WithLabelValues(kindFinal)))
	}
	wantHash(t, hgetall(t, r, "candle:active:1m:DOT"), newer)
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
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "connectors/valkey.(*Sink)")
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
		s.amu.Lock()
		held := len(s.pending)
		s.amu.Unlock()
		if held > 2*len(syms) { // one per key, plus what a flush in progress may put back
			t.Fatalf("after %d windows of the outage %d active candles wait for Valkey; want at most one per key (%d)", n, held, len(syms))
		}
	}
	if d := counter(s.m.dropped); d < float64(windows) {
		t.Fatalf("active_dropped_total = %v after replacing %d windows during the outage", d, windows)
	}
	s.amu.Lock()
	for w := range s.pending {
		if w.open != windows*minute {
			t.Errorf("pending holds window %d of %s, want only the newest (%d)", w.open, w.sym, windows*minute)
		}
	}
	s.amu.Unlock()
}
