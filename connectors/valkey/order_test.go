package valkey

import (
	"context"
	"testing"
	"time"
)

// A live update still pending when its window's final is flushed is
// superseded by the final: it is dropped (counted as coalesced), so a chart
// subscriber never sees the closed candle reopen with a stale live state.
// Ordering it costs no round trip.
func TestLiveUpdateNeverPublishedAfterItsFinal(t *testing.T) {
	srv := startRedis(t)
	r := reader(t, srv.Addr)
	s := newSink(t, srv.Addr, func(c *Config) { c.Coalesce = time.Hour }) // the live update stays pending
	sub := subscribe(t, r, "pub:candle:1m:ORD")
	ctx := context.Background()

	s.Active(mk("ORD", 10, "1", "2", "1", "2", "1", "2", 1))
	final := mk("ORD", 10, "1", "3", "1", "3", "2", "5", 2)
	t0 := s.RoundTrips()
	if err := s.Write(ctx, []candle1{final}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.RoundTrips() - t0; n != 1 {
		t.Fatalf("flushing one final took %d round trips, want 1 (the superseded live update needs none)", n)
	}
	// Whatever is still pending is sent now; then the next window's update
	// marks the end of what the subscriber can get.
	if err := s.FlushActive(ctx); err != nil {
		t.Fatal(err)
	}
	next := mk("ORD", 11, "3", "3", "3", "3", "1", "3", 1)
	s.Active(next)
	if err := s.FlushActive(ctx); err != nil {
		t.Fatal(err)
	}
	sawFinal := false
	for {
		m := recv(t, sub)
		if m.OpenTime == next.OpenTime {
			break
		}
		if m.Final {
			if m.Candle != final {
				t.Fatalf("final published as %+v, want %+v", m.Candle, final)
			}
			sawFinal = true
			continue
		}
		if sawFinal {
			t.Fatalf("live update %+v of window %d published after its final", m.Candle, m.OpenTime/minute)
		}
	}
	if !sawFinal {
		t.Fatal("the final was not published")
	}
	if got := counter(s.m.coalesced); got != 1 {
		t.Fatalf("active_coalesced_total = %v, want 1 (the live update superseded by the final)", got)
	}
	if got := counter(s.m.dropped); got != 0 {
		t.Fatalf("active_dropped_total = %v, want 0 (Valkey was reachable)", got)
	}
	wantHash(t, hgetall(t, r, "candle:active:1m:ORD"), next)
}

// The live updates of a final's key that are newer than the final (the
// next window already trading) are published before it, in one extra
// round trip; a pending update of another key costs nothing and stays
// pending.
func TestFinalsPublishPendingLiveOfTheirKeysFirst(t *testing.T) {
	srv := startRedis(t)
	r := reader(t, srv.Addr)
	s := newSink(t, srv.Addr, func(c *Config) { c.Coalesce = time.Hour })
	sub := subscribe(t, r, "pub:candle:1m:ORD")
	ctx := context.Background()

	live := mk("ORD", 21, "5", "5", "5", "5", "1", "5", 1)
	other := mk("OTHER", 21, "7", "7", "7", "7", "1", "7", 1)
	s.Active(live)
	s.Active(other)
	lone := mk("LONE", 20, "1", "1", "1", "1", "1", "1", 1) // no live update pending
	t0 := s.RoundTrips()
	if err := s.Write(ctx, []candle1{lone}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.RoundTrips() - t0; n != 1 {
		t.Fatalf("a final of a key with nothing pending took %d round trips, want 1", n)
	}
	if got := len(s.pendingWindows()); got != 2 {
		t.Fatalf("%d live updates pending, want both still pending", got)
	}

	final := mk("ORD", 20, "4", "4", "4", "4", "1", "4", 1)
	t0 = s.RoundTrips()
	if err := s.Write(ctx, []candle1{final}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.RoundTrips() - t0; n != 2 {
		t.Fatalf("flushing a final with a newer live update pending took %d round trips, want 2", n)
	}
	if m := recv(t, sub); m.Final || m.Candle != live {
		t.Fatalf("first published %+v, want the pending live update %+v", m, live)
	}
	if m := recv(t, sub); !m.Final || m.Candle != final {
		t.Fatalf("then published %+v, want the final %+v", m, final)
	}
	wantHash(t, hgetall(t, r, "candle:active:1m:ORD"), live) // the hash never goes back
	if got := counter(s.m.coalesced); got != 0 {
		t.Fatalf("active_coalesced_total = %v, want 0", got)
	}
}
