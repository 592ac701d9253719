package valkey

import (
	"context"
	"testing"
)

// TestEventsDeviceStatus writes silence events to redis-server twice
// (redelivery): the device's status hash ends at its latest event, every
// event is published on the device's channel, and an event without a
// device is skipped and counted.
func TestEventsDeviceStatus(t *testing.T) {
	srv := startRedis(t)
	r := reader(t, srv.Addr)
	s := newSink(t, srv.Addr, func(c *Config) { c.KeyPrefix = "t:" })
	sub := subscribe(t, r, "t:pub:device:d1")
	evs := [][]byte{
		[]byte(`{"device":"d1","event":"unreachable","level":"unreachable","action":"status","last_seen":"2026-01-01T08:00:00.000Z","due_at":"2026-01-04T08:00:00.000Z","fired_at":"2026-01-04T08:00:00.000Z","owner":"alice"}`),
		[]byte(`{"device":"d1","event":"recovered","level":"recovered","highest":"unreachable","last_seen":"2026-01-01T08:00:00.000Z","recovered_at":"2026-01-05T08:00:00.000Z","owner":"alice"}`),
		[]byte(`{"event":"alert1"}`),
	}
	ctx := context.Background()
	for round := 0; round < 2; round++ {
		if err := s.WriteEvents(ctx, evs); err != nil {
			t.Fatal(err)
		}
	}
	h := hgetall(t, r, "t:device:status:d1")
	if h["status"] != "recovered" || h["recovered_at"] != "2026-01-05T08:00:00.000Z" || h["event"] != string(evs[1]) {
		t.Fatalf("status hash %v, want the recovered event", h)
	}
	for i := 0; i < 4; i++ { // two events, delivered twice
		m := recv(t, sub)
		if m.Symbol != "" { // pubMsg decodes candles; an event has no symbol field
			t.Fatalf("unexpected message %+v", m)
		}
	}
	if n := counter(s.m.rejected); n != 2 {
		t.Fatalf("rejected %v events, want the one without device twice", n)
	}
}
