package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/gen"
	"github.com/kandle/kandle/topology"
)

// failoverTopology is one stage with the shipped defaults (lateness,
// idle_timeout, max_future, commit_interval): the takeover is per stage
// partition, so one partition of one stage shows it.
const failoverTopology = `
name: fo
brokers: [%s]
metrics: ""
sources:
  trades: {topic: trades, partitions: 1}
processors:
  1m: {kind: candles, from: trades, timeframe: 1m, output: {topic: fo.1m, partitions: 1}}
dead_letter: {topic: fo.dlq}
`

// BenchmarkFailover measures what it costs a new owner to take over a
// partition: from the assignment to the first candle it outputs, with the
// state of 100k keys (KANDLE_FAILOVER_KEYS) built from a history of 1 M and
// 10 M trades (KANDLE_FAILOVER_HISTORY, comma separated). A first owner
// consumes the whole history and stops; then a second instance takes the
// partition over, either with an empty disk (a new machine: the state comes
// from the changelog) or with the first owner's Pebble directory (a restart
// on the same machine: only the changelog tail is read). A trade produced
// before the takeover closes a window, so the first output follows the
// restore.
//
// Reported: takeover-ms (the first assignment → first output visible to a
// read-committed consumer), restore-ms and the changelog records of the
// first restore, and restores (more than one: a transaction aborted and the
// partition was rebuilt before the first output). A takeover that grows
// with the history means the restore reads it. KANDLE_FAILOVER_LOG=1
// echoes the new owner's log to stderr.
//
// The trade that ends the history closes every key's open windows at once
// (100 k keys × a few windows), so the first transaction of the new owner
// holds a few hundred thousand candles and state changes.
func BenchmarkFailover(b *testing.B) {
	benchFailover(b, envInt(b, "KANDLE_FAILOVER_KEYS", 100_000), "KANDLE_FAILOVER_HISTORY", "1000000,10000000", runFailover)
}

// benchFailover runs a takeover for each history (the comma-separated
// trade counts in the environment variable histEnv, else def) with an empty
// and with a kept disk, and reports it.
func benchFailover(b *testing.B, keys int, histEnv, def string, run func(b *testing.B, keys, n int, keepDisk bool) takeover) {
	hist := def
	if v := os.Getenv(histEnv); v != "" {
		hist = v
	}
	for _, hs := range strings.Split(hist, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(hs))
		if err != nil || n <= 0 {
			b.Fatalf("%s: %q is not a positive count of trades", histEnv, hs)
		}
		for _, disk := range []string{"empty", "kept"} {
			b.Run(fmt.Sprintf("history=%s/disk=%s", short(n), disk), func(b *testing.B) {
				var r takeover
				for range b.N {
					r = run(b, keys, n, disk == "kept")
				}
				b.ReportMetric(float64(r.total.Microseconds())/1000, "takeover-ms")
				b.ReportMetric(float64(r.restore.Microseconds())/1000, "restore-ms")
				b.ReportMetric(float64(r.records), "changelog-records")
				b.ReportMetric(float64(r.restores), "restores")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s: %q is not a positive integer", name, v)
	}
	return n
}

func short(n int) string {
	switch {
	case n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return strconv.Itoa(n)
}

type takeover struct {
	total, restore time.Duration
	records        int64
	restores       int // more than 1: a transaction aborted (e.g. it outlived the transaction timeout) and the partition was rebuilt
}

// restoreLog catches the stage's "partition restored" line (a Kinesis
// stage's "shard opened"): when it was written, how long the restore took
// and how many changelog records it read.
type restoreLog struct {
	mu       sync.Mutex
	at       time.Time
	took     time.Duration
	records  int64
	restores int
	seen     chan struct{}
	once     sync.Once
	echo     bool // KANDLE_FAILOVER_LOG set: the new owner's log goes to stderr
}

func (h *restoreLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *restoreLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *restoreLog) WithGroup(string) slog.Handler            { return h }
func (h *restoreLog) Handle(_ context.Context, r slog.Record) error {
	if h.echo {
		fmt.Fprintf(os.Stderr, "%s %s %s", r.Time.Format("15:04:05.000"), r.Level, r.Message)
		r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(os.Stderr, " %s=%v", a.Key, a.Value); return true })
		fmt.Fprintln(os.Stderr)
	}
	if r.Message != "partition restored" && r.Message != "shard opened" { // a Kafka partition's restore, a Kinesis shard's
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.restores++
	if h.restores > 1 {
		return nil // a rebuild after an aborted transaction: the takeover began with the first
	}
	h.at = r.Time
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "took":
			h.took = a.Value.Duration()
		case "changelog_records":
			h.records = a.Value.Int64()
		}
		return true
	})
	h.once.Do(func() { close(h.seen) })
	return nil
}

func runFailover(b *testing.B, keys, n int, keepDisk bool) takeover {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	broker, err := kafka.StartDevBroker(kafka.WithListen("127.0.0.1:0"))
	if err != nil {
		b.Fatal(err)
	}
	defer broker.Close()
	seeds := broker.Addrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(1<<20))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	if _, err := kafka.EnsureTopics(ctx, cl, []kafka.TopicSpec{{Name: "trades", Partitions: 1}}); err != nil {
		b.Fatal(err)
	}
	g, start, span := history(b, keys, n)
	if _, err := gen.Produce(ctx, cl, "trades", g, 0); err != nil {
		b.Fatal(err)
	}
	top, err := topology.Parse("fo.yaml", fmt.Appendf(nil, failoverTopology, seeds[0]), topology.Registry{})
	if err != nil {
		b.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)

	// The first owner consumes the whole history, then stops.
	dirA := b.TempDir()
	a, err := engine.New(top, engine.WithLogger(quiet), engine.WithInstanceID("a"), engine.WithStateDir(dirA))
	if err != nil {
		b.Fatal(err)
	}
	actx, acancel := context.WithCancel(ctx)
	adone := make(chan error, 1)
	go func() { adone <- a.Run(actx) }()
	adm := kadm.NewClient(cl)
	waitLag(ctx, b, adm, top.Group+".1m", adone)
	acancel()
	if err := <-adone; err != nil {
		b.Fatal(err)
	}
	checkProcessed(b, adm, "fo.dlq", "fo.1m") // a dead-lettered history leaves no state to take over

	// A read-committed consumer from the output's current end, and one trade
	// two minutes past the history, which closes every key's open window (and
	// with gap fill, on by default, a gap candle or two per key).
	out := outputFromEnd(ctx, b, adm, seeds, "fo.1m")
	defer out.Close()
	ts := start.Add(span + 2*time.Minute).UnixMilli()
	v := fmt.Appendf(nil, `{"symbol":"K000000","ts":%d,"price":"100","qty":"1","trade_id":%d}`, ts, 1<<40)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "trades", Key: []byte("K000000"), Value: v}).FirstErr(); err != nil {
		b.Fatal(err)
	}

	// The new owner.
	dirB := b.TempDir()
	if keepDisk {
		dirB = dirA
	}
	return takeOver(ctx, b, top, dirB, out)
}

// takeOver runs a new owner of top's stage on dir until out, a
// read-committed consumer of its output, reads its first record, and
// returns the time from the start of its first restore to then.
func takeOver(ctx context.Context, b *testing.B, top *topology.Topology, dir string, out *kgo.Client) takeover {
	rl := &restoreLog{seen: make(chan struct{}), echo: os.Getenv("KANDLE_FAILOVER_LOG") != ""}
	bEng, err := engine.New(top, engine.WithLogger(slog.New(rl)), engine.WithInstanceID("b"), engine.WithStateDir(dir))
	if err != nil {
		b.Fatal(err)
	}
	bctx, bcancel := context.WithCancel(ctx)
	bdone := make(chan error, 1)
	b.StartTimer()
	go func() { bdone <- bEng.Run(bctx) }()
	var first time.Time
	for first.IsZero() {
		fs := out.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			b.Fatalf("no output from the new owner: %v", err)
		}
		if fs.NumRecords() > 0 {
			first = time.Now()
		}
	}
	b.StopTimer()
	bcancel()
	if err := <-bdone; err != nil {
		b.Fatal(err)
	}
	select {
	case <-rl.seen:
	default:
		b.Fatal("the new owner wrote no restore line")
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	assigned := rl.at.Add(-rl.took)
	return takeover{total: first.Sub(assigned), restore: rl.took, records: rl.records, restores: rl.restores}
}

// history generates n trades of keys keys from start over span: one trade
// per key and minute on average, whatever n, so the state (each key's open
// window with the ids dedupe keeps for it) is the same for every history;
// only the history's length grows with n.
func history(b *testing.B, keys, n int) (g *gen.Generator, start time.Time, span time.Duration) {
	cfg := gen.DefaultConfig()
	cfg.Symbols = make([]string, keys)
	for i := range cfg.Symbols {
		cfg.Symbols[i] = fmt.Sprintf("K%06d", i)
	}
	start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	span = max(2*time.Minute, time.Duration(n/keys)*time.Minute)
	cfg.Count, cfg.Span, cfg.Start = n, span, start
	g, err := gen.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return g, start, span
}

// outputFromEnd returns a read-committed consumer of partition 0 of topic
// from its current end.
func outputFromEnd(ctx context.Context, b *testing.B, adm *kadm.Client, seeds []string, topic string) *kgo.Client {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		b.Fatal(err)
	}
	end, _ := ends.Lookup(topic, 0)
	out, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(10*time.Millisecond),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(end.Offset)}}))
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// waitLag polls until group has committed every input offset.
func waitLag(ctx context.Context, b *testing.B, adm *kadm.Client, group string, done <-chan error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			b.Fatalf("the engine stopped before the end of the history: %v", err)
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		case <-tick.C:
		}
		lag, err := adm.Lag(ctx, group)
		if err != nil {
			continue
		}
		if l, ok := lag[group]; ok && len(l.Lag) > 0 && l.Lag.Total() == 0 {
			return
		}
	}
}
