package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
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

// A partition the group takes away and later gives back, when the stage
// never saw it go (kgo's transact session skips a revoke that comes before
// the session's End of an earlier one), is restored again when it comes
// back: meanwhile another member committed it. Here a never sees its
// revokes. b takes one of the two partitions, counts trades of the window
// a's trades opened (committing dedupe id chunks of it, one per
// transaction) and leaves; a gets the partition back. Had a kept the state
// it held before b, it would count its trades onto that state: the
// window's candle would miss b's trades, and its id chunks would overwrite
// b's, leaving chunks of the window no key entry knows once it closes (a
// state no restore accepts). In "busy", trades keep coming while b leaves,
// so the partition may come back while a has a transaction open, whose
// input must not be lost either.
func TestMissedRevokeThenReassignRestores(t *testing.T) {
	testkit.WallClockTest(t)
	for _, busy := range []bool{false, true} {
		t.Run(map[bool]string{false: "idle", true: "busy"}[busy], func(t *testing.T) { testMissedRevokeThenReassign(t, busy) })
	}
}

func testMissedRevokeThenReassign(t *testing.T, busy bool) {
	r := newKfakeRig(t, 2) // the clock stays at 00:00:02 until the last step: no idle advance drops the ghost
	id := 0
	sent := [2]int64{}
	batch := func(at time.Duration, n int) { // n trades on each partition, then wait for their commits
		t.Helper()
		for p := range int32(2) {
			for range n {
				id++
				r.trade(p, id, at)
				sent[p]++
			}
		}
		r.waitFor(fmt.Sprintf("the trades up to id %d to commit", id), 30*time.Second, func() bool {
			return r.committed(0) == sent[0] && r.committed(1) == sent[1]
		})
	}
	regA := prometheus.NewRegistry()
	stopA := r.start("a", t.TempDir(), regA, engine.WithDropRevokeHook(func(string) bool { return true }))
	batch(time.Second, 3)

	regB := prometheus.NewRegistry()
	stopB := r.start("b", t.TempDir(), regB)
	r.waitFor("b to own a partition", 30*time.Second, func() bool { return gauge(t, regB, "kandle_partitions_owned") == 1 })
	for i := range 3 { // three transactions of b: three id chunks of the window
		batch(time.Second+time.Duration(i+1)*100*time.Millisecond, 2)
	}
	var flow sync.WaitGroup
	stopFlow := make(chan struct{})
	if busy {
		flow.Go(func() {
			for {
				select {
				case <-stopFlow:
					return
				case <-time.After(5 * time.Millisecond):
				}
				for p := range int32(2) {
					id++
					v := fmt.Appendf(nil, `{"symbol":"BTC","ts":%d,"price":"43","qty":"1","trade_id":%d}`, r.minute.Add(1600*time.Millisecond).UnixMilli(), id)
					if err := r.cl.ProduceSync(context.Background(), &kgo.Record{Topic: "trades", Partition: p, Key: []byte("BTC"), Value: v}).FirstErr(); err != nil {
						t.Error(err)
						return
					}
					sent[p]++
				}
			}
		})
	}
	stopB() // a gets the partition back
	time.Sleep(time.Second)
	close(stopFlow)
	flow.Wait()
	batch(1700*time.Millisecond, 2)

	// The next minute closes the window.
	r.clock.Set(r.minute.Add(time.Minute + 3*time.Second))
	batch(time.Minute+2*time.Second, 1)
	want := replayOf(t, r)
	if len(want["c.1m"]) != 2 {
		t.Fatalf("the replay closed %d windows, want 2 (one a partition)", len(want["c.1m"]))
	}
	r.waitFor("the closed windows' candles", 30*time.Second, func() bool { return len(r.read("c.1m")) >= 2 })
	got := map[string][]string{"c.1m": r.read("c.1m")}
	sort.Strings(got["c.1m"])
	if diff := diffOutputs(want, got); diff != "" {
		t.Errorf("the candles differ from a replay (a built on the state it held before b):\n%s", diff)
	}
	stopA()

	// Every partition's committed state restores: no id chunk without the
	// open window of its key.
	changelog := r.top.Name + ".c1m.changelog"
	parts := map[int32]map[string][]byte{}
	for _, rec := range testkit.ReadTopic(t, r.seeds, changelog) {
		if rec.Attrs.IsControl() || len(rec.Key) < 2 || rec.Key[0] != 'p' {
			continue
		}
		st := parts[rec.Partition]
		if st == nil {
			st = map[string][]byte{}
			parts[rec.Partition] = st
		}
		if rec.Value == nil {
			delete(st, string(rec.Key[1:]))
		} else {
			st[string(rec.Key[1:])] = rec.Value
		}
	}
	if len(parts) != 2 {
		t.Fatalf("the changelog holds the state of %d partitions, want 2", len(parts))
	}
	for p, st := range parts {
		if err := engine.RestoreEntries(r.top, "c1m", st); err != nil {
			t.Errorf("partition %d: the committed state does not restore: %v", p, err)
		}
	}
}
