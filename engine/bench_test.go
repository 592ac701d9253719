package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/gen"
	"github.com/kandle/kandle/topology"
)

const benchTopology = `
name: bench
brokers: [%s]
metrics: ""
commit_interval: %s
sources:
  trades: {topic: trades, partitions: 2}
processors:
  # Benchmark override (idle_timeout only): the trades are stamped in
  # January 2026; with the shipped idle_timeout the caught-up stages would
  # go on emitting wall-clock gap candles for 200 symbols after the measured
  # input, load that is not the throughput measured here. The shipped
  # max_future stays on: its clock read per record is part of what users run.
  1m: {kind: candles, from: trades, timeframe: 1m, idle_timeout: 0s, output: {topic: c.1m, partitions: 2}}
  5m: {kind: rollup, from: 1m, timeframe: 5m, output: {topic: c.5m, partitions: 2}}
  15m: {kind: rollup, from: 5m, timeframe: 15m, output: {topic: c.15m, partitions: 2}}
  1h: {kind: rollup, from: 15m, timeframe: 1h, output: {topic: c.1h, partitions: 2}}
  4h: {kind: rollup, from: 1h, timeframe: 4h, output: {topic: c.4h, partitions: 2}}
  1d: {kind: rollup, from: 4h, timeframe: 1d, output: {topic: c.1d, partitions: 2}}
  1w: {kind: rollup, from: 1d, timeframe: 1w, output: {topic: c.1w, partitions: 1}}
  1M: {kind: rollup, from: 1d, timeframe: 1M, output: {topic: c.1M, partitions: 1}}
dead_letter: {topic: bench.dlq}
`

// BenchmarkEndToEnd measures trades/s through the whole exactly-once path on
// the in-process dev broker: consume → 1m candles → seven rollups →
// transactional produce of candles, changelog and offsets. The trades are
// produced before the timer starts; the clock stops when every stage has
// committed its offsets for all its input (the 1m stage for every trade,
// each rollup stage for every candle of the stage it reads; a fused
// rollup is done with the stage it runs in). KANDLE_TEST_FUSE=off runs
// every rollup as a stage of its own, =on (the default) fused.
//
// Two streams of 1M trades over 200 symbols: "dense" spans 2 hours (~0.02
// closed 1m candles per trade, like a liquid market), "sparse" spans 48
// hours (~0.6 candles per trade, the worst case: output dominates).
func BenchmarkEndToEnd(b *testing.B) {
	for _, stream := range []struct {
		name string
		span time.Duration
	}{{"dense", 2 * time.Hour}, {"sparse", 48 * time.Hour}} {
		for _, interval := range []string{"25ms", "200ms"} {
			b.Run(stream.name+"/commit="+interval, func(b *testing.B) {
				const n = 1_000_000
				var rate, cpuRate float64
				for range b.N {
					rate, cpuRate = runEndToEnd(b, n, stream.span, interval)
				}
				b.ReportMetric(rate, "trades/s")
				// CPU time of the whole process (stages and in-process
				// broker) while the clock ran: steadier than trades/s on a
				// shared machine, where the wall clock mostly measures the
				// other processes.
				b.ReportMetric(cpuRate, "trades/cpu-s")
			})
		}
	}
}

// runEndToEnd returns trades per second of wall time and per second of the
// process's CPU time, both over the timed part.
func runEndToEnd(b *testing.B, n int, span time.Duration, interval string) (rate, cpuRate float64) {
	b.StopTimer()
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
	if _, err := kafka.EnsureTopics(context.Background(), cl, []kafka.TopicSpec{{Name: "trades", Partitions: 2}}); err != nil {
		b.Fatal(err)
	}
	cfg := gen.DefaultConfig()
	cfg.Symbols = make([]string, 200)
	for i := range cfg.Symbols {
		cfg.Symbols[i] = fmt.Sprintf("SYM%03d", i)
	}
	cfg.Count, cfg.Span, cfg.Start = n, span, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g, err := gen.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := gen.Produce(context.Background(), cl, "trades", g, 0); err != nil {
		b.Fatal(err)
	}
	top, err := topology.Parse("bench.yaml", fmt.Appendf(nil, benchTopology, seeds[0], interval), topology.Registry{})
	if err != nil {
		b.Fatal(err)
	}
	if modes := fuseModes(); len(modes) == 1 { // KANDLE_TEST_FUSE=on or off; default: as the topology says (fused)
		setFuse(top, modes[0])
	}
	groups, err := stageGroups(top)
	if err != nil {
		b.Fatal(err)
	}
	eng, err := engine.New(top, engine.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), engine.WithInstanceID("bench"))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	stopProfile := profileTimed(b)
	b.StartTimer()
	start, cpu0 := time.Now(), processCPU()
	go func() { done <- eng.Run(ctx) }()
	adm := kadm.NewClient(cl)
	for !caughtUp(ctx, adm, groups) {
		time.Sleep(20 * time.Millisecond)
	}
	elapsed, cpu := time.Since(start), processCPU()-cpu0
	b.StopTimer()
	stopProfile()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	checkProcessed(b, adm, "bench.dlq", "c.1m")
	return float64(n) / elapsed.Seconds(), float64(n) / cpu.Seconds()
}

// checkProcessed fails the benchmark when any input went to the dead-letter
// topic dlq or the stage writing out wrote nothing: a run whose trades are
// dead-lettered still catches up, and measures nothing.
func checkProcessed(b *testing.B, adm *kadm.Client, dlq, out string) {
	ends, err := adm.ListEndOffsets(context.Background(), dlq, out)
	if err != nil {
		b.Fatal(err)
	}
	var dead, made int64
	ends.Each(func(o kadm.ListedOffset) {
		switch {
		case errors.Is(o.Err, kerr.UnknownTopicOrPartition): // never written
		case o.Err != nil:
			b.Fatalf("end offsets of %s/%d: %v", o.Topic, o.Partition, o.Err)
		case o.Topic == dlq:
			dead += o.Offset
		default:
			made += o.Offset
		}
	})
	if dead > 0 || made == 0 {
		b.Fatalf("the run dead-lettered %d records to %s and wrote %d to %s: the benchmark's input was not processed", dead, dlq, made, out)
	}
}

// stageGroups lists the consumer groups of the stages of top: a fused
// processor has none (it is done when the stage it runs in is).
func stageGroups(top *topology.Topology) ([]string, error) {
	fused, err := engine.FusedInto(top)
	if err != nil {
		return nil, err
	}
	var out []string
	for name := range top.Processors {
		if _, ok := fused[name]; !ok {
			out = append(out, top.Group+"."+name)
		}
	}
	return out, nil
}

// caughtUp reports whether every group has committed every offset of its
// input, all in one look: the clock of an end-to-end run stops when the
// last rollup has taken the last candle, fused or not.
func caughtUp(ctx context.Context, adm *kadm.Client, groups []string) bool {
	lag, err := adm.Lag(ctx, groups...)
	if err != nil {
		return false
	}
	for _, g := range groups {
		l, ok := lag[g]
		if !ok || l.Error() != nil || len(l.Lag) == 0 {
			return false
		}
		// Partition by partition: a partition whose offsets could not be
		// listed has lag -1 and an error, which a total can hide (one run
		// stopped its clock after 0.7 s).
		for _, m := range l.Lag.Sorted() {
			if m.Err != nil || m.Lag != 0 {
				return false
			}
		}
	}
	return true
}

// processCPU returns the CPU time (user and system) this process used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// profileTimed starts a CPU profile of the timed part of one end-to-end run
// when KANDLE_E2E_CPUPROFILE names a file (instead of -cpuprofile, which
// also records producing the trades before the timer, on both the client's
// and the broker's side). It returns the function that stops it.
func profileTimed(b *testing.B) func() {
	path := os.Getenv("KANDLE_E2E_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
	}
}

// BenchmarkCloseLatency measures trade-to-final-candle latency: trades are
// produced live (event time = wall clock) into 1s windows; for every window,
// the latency is from sending the first trade that closes it (its event time
// passes the window's close; lateness 0) to the moment a read-committed
// consumer receives the closed candle. Reported as p50/p99 for two commit
// intervals; the commit interval bounds it from below.
func BenchmarkCloseLatency(b *testing.B) {
	for _, interval := range []string{"10ms", "25ms", "100ms"} {
		b.Run("commit="+interval, func(b *testing.B) {
			var p50, p99 time.Duration
			for range b.N {
				p50, p99 = runCloseLatency(b, interval, 8*time.Second)
			}
			b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
		})
	}
}

const latencyTopology = `
name: lat
brokers: [%s]
metrics: ""
commit_interval: %s
sources:
  trades: {topic: trades, partitions: 1}
processors:
  # Benchmark override: it measures the close by the next trade (lateness 0,
  # so max_future must be 0 too); idle advance would close windows by the
  # wall clock and measure idle_timeout instead.
  1s: {kind: candles, from: trades, timeframe: 1s, lateness: 0s, idle_timeout: 0s, max_future: 0s, output: {topic: c.1s, partitions: 1}}
dead_letter: {topic: lat.dlq}
`

func runCloseLatency(b *testing.B, interval string, run time.Duration) (p50, p99 time.Duration) {
	b.StopTimer()
	broker, err := kafka.StartDevBroker(kafka.WithListen("127.0.0.1:0"))
	if err != nil {
		b.Fatal(err)
	}
	defer broker.Close()
	seeds := broker.Addrs()
	top, err := topology.Parse("lat.yaml", fmt.Appendf(nil, latencyTopology, seeds[0], interval), topology.Registry{})
	if err != nil {
		b.Fatal(err)
	}
	eng, err := engine.New(top, engine.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), engine.WithInstanceID("lat"))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	cons, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics("c.1s"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(10*time.Millisecond), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		b.Fatal(err)
	}
	defer cons.Close()

	var mu sync.Mutex
	closedBy := map[int64]time.Time{} // window close (ms) → when the trade closing it was sent
	var lat []time.Duration
	recv := make(chan struct{})
	go func() {
		defer close(recv)
		for ctx.Err() == nil {
			fs := cons.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				c, err := candle.ParseJSON(r.Value)
				if err != nil {
					return
				}
				mu.Lock()
				if sent, ok := closedBy[c.CloseTime]; ok {
					lat = append(lat, now.Sub(sent))
					delete(closedBy, c.CloseTime)
				}
				mu.Unlock()
			})
		}
	}()
	time.Sleep(500 * time.Millisecond) // the stage joins its group
	b.StartTimer()
	var lastSec int64 = -1
	for end, i := time.Now().Add(run), 0; time.Now().Before(end); i++ {
		now := time.Now()
		sec := now.UnixMilli() / 1000
		v := fmt.Appendf(nil, `{"symbol":"BTC","ts":%d,"price":"100","qty":"1","trade_id":%d}`, now.UnixMilli(), i)
		if sec != lastSec && lastSec >= 0 {
			mu.Lock()
			closedBy[sec*1000] = now // this trade's event time passes the close of window sec-1
			mu.Unlock()
		}
		lastSec = sec
		prod.Produce(ctx, &kgo.Record{Topic: "trades", Key: []byte("BTC"), Value: v}, nil)
		time.Sleep(2 * time.Millisecond)
	}
	b.StopTimer()
	time.Sleep(time.Second)
	cancel()
	<-recv
	mu.Lock()
	defer mu.Unlock()
	if len(lat) < 3 {
		b.Fatalf("only %d windows measured", len(lat))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
}
