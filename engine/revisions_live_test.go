package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
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

const revTopology = `
name: rev
brokers: [%s]
metrics: ""
commit_interval: 50ms
sources:
  trades: {topic: trades, partitions: 1}
processors:
  1m: {kind: candles, from: trades, timeframe: 1m, revise_within: 1h, idle_timeout: 0s, output: {topic: rev.1m, partitions: 1}}
  5m: {kind: rollup, from: 1m, timeframe: 5m, output: {topic: rev.5m, partitions: 1}}
dead_letter: {topic: rev.dlq}
`

// A running group with a revision horizon: late trades inside it revise the
// closed 1m window (rev 1, then rev 2) and, through the rollup, the closed
// 5m window (rev 1); kandle_revisions_total counts them per stage, no late
// trade is dead-lettered, and a replay of the same input writes the same
// candles, revisions included.
func TestRevisionsLiveMetricsAndReplay(t *testing.T) {
	testkit.WallClockTest(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	trade := func(id int, at time.Duration, price string) *kgo.Record {
		v := fmt.Sprintf(`{"symbol":"BTC","ts":%d,"price":"%s","qty":"1","trade_id":%d}`, t0.Add(at).UnixMilli(), price, id)
		return &kgo.Record{Topic: "trades", Key: []byte("BTC"), Value: []byte(v)}
	}
	recs := []*kgo.Record{
		trade(1, 10*time.Second, "100"),
		trade(2, 65*time.Second, "101"),               // W 00:01:03 closes 00:00 (rev 0)
		trade(3, 20*time.Second, "105"),               // late, inside the horizon
		trade(4, 70*time.Second, "102"),               // the watermark moves: 00:00 rev 1
		trade(5, 5*time.Minute+5*time.Second, "103"),  // closes 00:01 to 00:04, and the 5m window 00:00 (rev 0)
		trade(6, 30*time.Second, "90"),                // late again: a new low
		trade(7, 5*time.Minute+10*time.Second, "104"), // 1m 00:00 rev 2, 5m 00:00 rev 1
	}
	run := startRevisionRun(t, "rev", revTopology, 1, recs)
	ctx, seeds, top, reg, log := context.Background(), run.seeds, run.top, run.reg, run.log
	deadline := time.Now().Add(60 * time.Second)
	for counter(t, reg, "kandle_revisions_total", "1m") < 2 || counter(t, reg, "kandle_revisions_total", "5m") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("revisions after 60s: 1m %v (want 2), 5m %v (want 1)",
				counter(t, reg, "kandle_revisions_total", "1m"), counter(t, reg, "kandle_revisions_total", "5m"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := counter(t, reg, "kandle_revisions_total", "1m"); n != 2 {
		t.Errorf("kandle_revisions_total{stage=1m} = %v, want 2", n)
	}
	if n := counter(t, reg, "kandle_revisions_total", "5m"); n != 1 {
		t.Errorf("kandle_revisions_total{stage=5m} = %v, want 1", n)
	}
	if n := counter(t, reg, "kandle_rejected_total", "late"); n != 0 {
		t.Errorf("kandle_rejected_total{reason=late} = %v, want 0: every late trade is inside the horizon", n)
	}

	// The counters move when a stage emits, the topics when it commits.
	var live map[string][]string
	var newest *candle.Candle
	for {
		live, newest = map[string][]string{}, nil
		for _, topic := range []string{"rev.1m", "rev.5m"} {
			for _, r := range testkit.ReadTopic(t, seeds, topic) {
				if engine.IsQuietRecord(r) {
					continue
				}
				live[topic] = append(live[topic], string(r.Value))
				c, err := candle.ParseJSON(r.Value)
				if err != nil {
					t.Fatal(err)
				}
				if topic == "rev.1m" && c.OpenTime == t0.UnixMilli() {
					newest = &c
				}
			}
			sort.Strings(live[topic])
		}
		if newest != nil && newest.Rev == 2 && len(live["rev.5m"]) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed after 60s: %v", live)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if newest == nil || newest.Rev != 2 || newest.Low.String() != "90" || newest.High.String() != "105" || newest.Trades != 3 {
		t.Errorf("newest 1m 00:00 candle %+v, want rev 2 with low 90, high 105, 3 trades", newest)
	}
	// Committed: the two late trades are counted as what revised the window.
	if n := counter(t, reg, "kandle_revision_inputs_total", "late"); n != 2 {
		t.Errorf("kandle_revision_inputs_total{stage=1m,kind=late} = %v, want 2", n)
	}
	if n := counter(t, reg, "kandle_revision_inputs_total", "cancel"); n != 0 {
		t.Errorf("kandle_revision_inputs_total{kind=cancel} = %v, want 0", n)
	}
	var buf bytes.Buffer
	if _, err := engine.Replay(ctx, top, seeds, engine.ReplayOptions{Started: time.Now(), Out: &topicRecorder{w: &buf}, Logger: log}); err != nil {
		t.Fatal(err)
	}
	replay := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		topic, c, _ := strings.Cut(l, " ")
		replay[topic] = append(replay[topic], c)
	}
	for _, topic := range []string{"rev.1m", "rev.5m"} {
		sort.Strings(replay[topic])
		if got, want := strings.Join(replay[topic], "\n"), strings.Join(live[topic], "\n"); got != want {
			t.Errorf("%s: replay differs from the live run:\nreplay:\n%s\nlive:\n%s", topic, got, want)
		}
	}
}

const revKeyTopology = `
name: revkey
brokers: [%s]
metrics: ""
commit_interval: 50ms
sources:
  trades: {topic: trades, partitions: 4}
processors:
  1m: {kind: candles, from: trades, timeframe: 1m, revise_within: 1h, idle_timeout: 0s, output: {topic: rk.1m, partitions: 4}}
  5m: {kind: rollup, from: 1m, timeframe: 5m, output: {topic: rk.5m, partitions: 3}}
dead_letter: {topic: rk.dlq}
`

// A running group with a revision horizon (the 5m rollup fused into the 1m
// stage) keys every candle record symbol@open_time on the partition Kafka's
// default partitioner gives the bare symbol (quiet records stay keyed and partitioned by symbol); keeping
// only the last record of every key, as compaction does, leaves exactly
// the newest revision of every window; a replay to topics writes the same
// keys, partitions and candles.
func TestRevisionsLiveWindowKeys(t *testing.T) {
	testkit.WallClockTest(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	symbols := []string{"BTC", "ETH", "SOL", "ADA", "XRP", "DOT", "a@b", "LTC"}
	id := 0
	trade := func(sym string, at time.Duration, price string) *kgo.Record {
		id++
		v := fmt.Sprintf(`{"symbol":%q,"ts":%d,"price":"%s","qty":"1","trade_id":%d}`, sym, t0.Add(at).UnixMilli(), price, id)
		return &kgo.Record{Topic: "trades", Key: []byte(sym), Value: []byte(v)}
	}
	var recs []*kgo.Record
	for _, step := range []struct {
		at    time.Duration
		price string
	}{
		{10 * time.Second, "100"},
		{65 * time.Second, "101"},
		{20 * time.Second, "105"}, // late, inside the horizon
		{70 * time.Second, "102"}, // 00:00 rev 1
		{5*time.Minute + 5*time.Second, "103"},
		{30 * time.Second, "90"},                // late again
		{5*time.Minute + 10*time.Second, "104"}, // 1m 00:00 rev 2, 5m 00:00 rev 1
	} {
		for _, sym := range symbols {
			recs = append(recs, trade(sym, step.at, step.price))
		}
	}
	run := startRevisionRun(t, "revkey", revKeyTopology, 4, recs)
	ctx, seeds, top, log, stop := context.Background(), run.seeds, run.top, run.log, run.stop
	if fused, err := engine.FusedInto(top); err != nil || fused["5m"] != "1m" {
		t.Fatalf("fused chains %v (%v): want 5m fused into 1m (the symbol's partition is its trades')", fused, err)
	}

	parts := map[string]int{"rk.1m": 4, "rk.5m": 3}
	kafkaP := kgo.StickyKeyPartitioner(nil).ForTopic("x")
	// read returns the candle records of topic on seeds, checking every
	// key and partition, and the newest candle of every window.
	read := func(seeds []string, topic string) (lines []string, newest map[string]candle.Candle) {
		newest = map[string]candle.Candle{}
		last := map[string]candle.Candle{} // what compaction keeps: the last record of every key
		for _, r := range testkit.ReadTopic(t, seeds, topic) {
			if engine.IsQuietRecord(r) {
				q, err := engine.DecodeQuiet(r.Value)
				if err != nil {
					t.Fatal(err)
				}
				if string(r.Key) != q.Symbol {
					t.Errorf("%s: quiet record of %s keyed %q", topic, q.Symbol, r.Key)
				}
				if want := kafkaP.Partition(&kgo.Record{Key: []byte(q.Symbol)}, parts[topic]); int(r.Partition) != want {
					t.Errorf("%s: quiet record of %s on partition %d, want %d", topic, q.Symbol, r.Partition, want)
				}
				continue
			}
			c, err := candle.ParseJSON(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			key := fmt.Sprintf("%s@%d", c.Symbol, c.OpenTime)
			if string(r.Key) != key {
				t.Errorf("%s: candle keyed %q, want %q", topic, r.Key, key)
			}
			if want := kafkaP.Partition(&kgo.Record{Key: []byte(c.Symbol)}, parts[topic]); int(r.Partition) != want {
				t.Errorf("%s: candle %s on partition %d, the symbol's is %d", topic, key, r.Partition, want)
			}
			if n, ok := newest[key]; !ok || c.Rev > n.Rev {
				newest[key] = c
			}
			if p, ok := last[string(r.Key)]; ok && c.Rev <= p.Rev {
				t.Errorf("%s: %s rev %d after rev %d", topic, key, c.Rev, p.Rev)
			}
			last[string(r.Key)] = c
			lines = append(lines, fmt.Sprintf("%d %s %s", r.Partition, r.Key, r.Value))
		}
		if len(last) != len(newest) {
			t.Errorf("%s: %d keys, %d windows", topic, len(last), len(newest))
		}
		for k, c := range newest {
			if l := last[k]; !l.Equal(&c) {
				t.Errorf("%s: the last record of %s is %+v, the newest revision %+v", topic, k, l, c)
			}
		}
		sort.Strings(lines)
		return lines, newest
	}
	deadline := time.Now().Add(60 * time.Second)
	live := map[string][]string{}
	for {
		var n1, n5 map[string]candle.Candle
		live["rk.1m"], n1 = read(seeds, "rk.1m")
		live["rk.5m"], n5 = read(seeds, "rk.5m")
		ok := len(n5) == len(symbols)
		for _, sym := range symbols {
			c := n1[fmt.Sprintf("%s@%d", sym, t0.UnixMilli())]
			ok = ok && c.Rev == 2 && c.Low.String() == "90" && c.High.String() == "105"
			ok = ok && n5[fmt.Sprintf("%s@%d", sym, t0.UnixMilli())].Rev == 1
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed after 60s:\n%s\n%s", strings.Join(live["rk.1m"], "\n"), strings.Join(live["rk.5m"], "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()

	// The replay to topics (another broker) writes the same records.
	other := devBroker(t)
	out, err := engine.NewTopicOutput(ctx, top, other, 0, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Replay(ctx, top, seeds, engine.ReplayOptions{Started: time.Now(), Out: out, Logger: log}); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"rk.1m", "rk.5m"} {
		replay, _ := read(other, topic)
		if got, want := strings.Join(replay, "\n"), strings.Join(live[topic], "\n"); got != want {
			t.Errorf("%s: replay differs from the live run:\nreplay:\n%s\nlive:\n%s", topic, got, want)
		}
	}
}

// revisionRun is a live engine run of a topology with a revision horizon,
// on a dev broker of its own.
type revisionRun struct {
	seeds []string
	top   *topology.Topology
	reg   *prometheus.Registry
	log   *slog.Logger
	stop  func() // stops the engine and checks it ended cleanly; idempotent, also run at cleanup
}

// startRevisionRun starts a dev broker, parses topoFmt (its %s is the
// broker) as name.yaml, produces recs to its trades topic of partitions
// partitions and starts the engine on it.
func startRevisionRun(t *testing.T, name, topoFmt string, partitions int32, recs []*kgo.Record) *revisionRun {
	t.Helper()
	seeds := devBroker(t)
	top, err := topology.Parse(name+".yaml", fmt.Appendf(nil, topoFmt, seeds[0]), topology.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if _, err := kafka.EnsureTopics(ctx, cl, []kafka.TopicSpec{{Name: "trades", Partitions: partitions}}); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := &revisionRun{seeds: seeds, top: top, reg: prometheus.NewRegistry(),
		log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	eng, err := engine.New(top, engine.WithStateDir(t.TempDir()), engine.WithInstanceID("a"), engine.WithLogger(r.log),
		engine.WithRegisterer(r.reg), engine.WithSessionTimeout(6*time.Second), engine.WithTransactionTimeout(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(runCtx) }()
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("engine: %v", err)
			}
		})
	}
	t.Cleanup(r.stop)
	return r
}
