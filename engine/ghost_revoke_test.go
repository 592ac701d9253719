package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/topology"
)

// A revoke that never reaches the stage must not leave a ghost owner. kgo's
// transact session skips the revoke callback while an earlier revoke waits
// for the session's End, which an idle stage may not call for a while; the
// stage then still holds a partition the group gave to another member, and
// an idle advance on it would commit that member's candles a second time
// (the ghost is a current member, so the generation check lets it commit).
// Here instance a never sees its revokes: when b joins and takes one of the
// two quiet partitions, both close the same windows by the wall clock, and
// every window must still reach the output exactly once.
func TestMissedRevokeLeavesNoGhostIdleAdvance(t *testing.T) {
	testkit.WallClockTest(t)
	b, err := kafka.StartDevBroker(kafka.WithListen("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	seeds := b.Addrs()
	// Shipped lateness and idle_timeout (2s, 5s).
	top, err := topology.Parse("ghost.yaml", fmt.Appendf(nil, `
name: ghost
brokers: [%s]
metrics: ""
sources:
  trades: {topic: trades, partitions: 2}
processors:
  c1m: {kind: candles, from: trades, timeframe: 1m, output: {topic: c.1m, partitions: 2}}
`, seeds[0]), topology.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if _, err := kafka.EnsureTopics(ctx, cl, []kafka.TopicSpec{{Name: "trades", Partitions: 2}}); err != nil {
		t.Fatal(err)
	}

	minute := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &settableClock{}
	clock.Set(minute.Add(2 * time.Second))
	for p, sym := range []string{"BTC", "ETH"} {
		v := fmt.Appendf(nil, `{"symbol":"%s","ts":%d,"price":"42","qty":"1","trade_id":1}`, sym, minute.Add(time.Second).UnixMilli())
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "trades", Partition: int32(p), Key: []byte(sym), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	start := func(name string, opts ...engine.Option) (*prometheus.Registry, func()) {
		reg := prometheus.NewRegistry()
		log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
		eng, err := engine.New(top, append([]engine.Option{engine.WithStateDir(t.TempDir()), engine.WithInstanceID(name),
			engine.WithLogger(log), engine.WithClock(clock), engine.WithRegisterer(reg),
			engine.WithSessionTimeout(6 * time.Second), engine.WithTransactionTimeout(6 * time.Second)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- eng.Run(rctx) }()
		return reg, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
	regA, stopA := start("a", engine.WithDropRevokeHook(func(string) bool { return true }))
	defer stopA()
	waitUntil(t, 30*time.Second, "a processed both trades", func() bool {
		return counter(t, regA, "kandle_records_total", "accepted") == 2
	})
	regB, stopB := start("b")
	defer stopB()
	waitUntil(t, 30*time.Second, "b owns one partition", func() bool {
		return gauge(t, regB, "kandle_partitions_owned") == 1
	})

	// Both keys are quiet past idle_timeout: each owner closes its windows
	// by the wall clock (an abort restarts a partition's idle clock, so the
	// clock keeps moving).
	now := minute.Add(2 * time.Minute)
	first := []string{fmt.Sprintf("BTC@%d", minute.UnixMilli()), fmt.Sprintf("ETH@%d", minute.UnixMilli())}
	windows := func() map[string]int {
		n := map[string]int{}
		for _, r := range testkit.ReadTopic(t, seeds, "c.1m") {
			if c, err := candle.ParseJSON(r.Value); err == nil {
				n[fmt.Sprintf("%s@%d", c.Symbol, c.OpenTime)]++
			}
		}
		return n
	}
	waitUntil(t, 60*time.Second, "both keys' first 1m candles closed", func() bool {
		now = now.Add(time.Second)
		clock.Set(now)
		time.Sleep(300 * time.Millisecond)
		n := windows()
		return n[first[0]] > 0 && n[first[1]] > 0
	})
	// Give a ghost time to close the same windows again (several probes).
	for range 10 {
		now = now.Add(time.Second)
		clock.Set(now)
		time.Sleep(300 * time.Millisecond)
	}
	for w, n := range windows() {
		if n != 1 {
			t.Errorf("window %s closed %d times, want once (a ghost owner advanced it by the wall clock)", w, n)
		}
	}
	if got := gauge(t, regA, "kandle_partitions_owned"); got != 1 {
		t.Errorf("a owns %v partitions after b joined, want 1 (the ghost dropped)", got)
	}
}
