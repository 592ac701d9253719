// Command peers compares kandle's end-to-end throughput with two peers on the
// same broker and the same trades: a naive single-goroutine franz-go +
// encoding/json aggregator, and a Goka processor (LevelDB storage, a
// persisted group table). It produces the trades once, runs each contestant
// from the start of the topic in its own consumer group, and prints one
// table of trades/s and ratios, then kandle's ratio to each peer.
//
//	go run . -n 10000000 -runs 3 -only kandle,naive  # the recorded comparison without Goka
//	go run . -n 1000000                              # all three (Goka needs minutes)
//	go run . -n 2000000 -runs 3 -only kandle,kandle-unfused  # fused against unfused rollups
//	go run . -n 10000000 -only kandle,goka -cleaner 10s -maxrss 7000 -timeout 100m
//
// kandle runs its topology's default: every rollup fused into the stage of
// the processor it reads (fed its candles in memory, in one exactly-once
// unit; each level's candles are still produced to its topic).
// kandle-unfused runs the same topology with fuse: false on every rollup:
// each a stage of its own that reads its input topic.
//
// Each contestant's clock starts when it is started and stops when it has
// processed every trade, so start-up is part of the figure; choose -n so
// that it is small against the run. "Processed" is, for kandle, that every
// one of its stages (the 1m stage, and unfused every rollup too)
// has committed every offset of its input, exactly once in its
// transactions, all seen in one look: a fused rollup commits what it
// computed in the transaction of its stage, so the stage's group stands
// for it. For Goka it is that its group has committed every input offset
// (after the state update and the emitted candles are acknowledged); the
// naive consumer counts the records it has handled, flushes its produced
// candles and commits.
//
// The in-process broker keeps every record in memory, and compacts the
// compacted topics (Goka's group table changelog, one record per trade;
// kandle's changelogs) only hourly by default: -cleaner sets how often, as
// a real broker's log cleaner would, and -maxrss stops the run before the
// process outgrows the machine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/internal/gen"
)

type config struct {
	n          int
	symbols    int
	span       time.Duration
	partitions int
	runs       int
	only       string
	broker     string
	timeout    time.Duration
	cpuprofile string
	cleaner    time.Duration
	maxRSS     int64
}

func main() {
	var c config
	flag.IntVar(&c.n, "n", 10_000_000, "trades in the stream")
	flag.IntVar(&c.symbols, "symbols", 1000, "symbols the trades are spread over")
	flag.DurationVar(&c.span, "span", 0, "event-time span of the stream (0: 7.2 ms of event time per trade, like BenchmarkEndToEnd's dense stream)")
	flag.IntVar(&c.partitions, "partitions", 2, "partitions of the trades topic")
	flag.IntVar(&c.runs, "runs", 1, "rounds; each round runs every contestant once, in turn")
	flag.StringVar(&c.only, "only", "kandle,naive,goka", "contestants, comma separated: kandle, kandle-unfused, naive, goka")
	flag.StringVar(&c.broker, "broker", "", "an external broker (e.g. `kandle dev-broker`) instead of the in-process one")
	flag.DurationVar(&c.timeout, "timeout", 30*time.Minute, "give up a contestant's run after this long")
	flag.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of each contestant's run to `prefix`.<contestant>.<round>.prof")
	flag.DurationVar(&c.cleaner, "cleaner", 0, "compact the broker's compacted topics (Goka's group table, kandle's changelogs) this often, as a real broker's log cleaner does (0: the in-process broker's default, hourly); bounds the broker's memory in long Goka runs")
	flag.Int64Var(&c.maxRSS, "maxrss", 0, "stop with an error when the process's resident memory passes this many MiB (0: no limit)")
	flag.Parse()
	if err := run(context.Background(), c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

// contestant runs one pass over the trades topic, with a consumer group of
// its own, and returns when every trade has been processed.
type contestant struct {
	name string
	run  func(ctx context.Context, seeds []string, group string, n int) error
}

func run(ctx context.Context, c config, out io.Writer) error {
	if c.n <= 0 || c.symbols <= 0 || c.partitions <= 0 || c.runs <= 0 {
		return errors.New("-n, -symbols, -partitions and -runs must be positive")
	}
	if c.span == 0 {
		c.span = time.Duration(c.n) * 7200 * time.Microsecond
	}
	seeds := strings.Split(c.broker, ",")
	if c.broker == "" {
		b, err := kafka.StartDevBroker(kafka.WithListen("127.0.0.1:0"))
		if err != nil {
			return fmt.Errorf("start the in-process broker: %w", err)
		}
		defer b.Close()
		seeds = b.Addrs()
	}
	if c.cleaner > 0 {
		if err := setCleaner(ctx, seeds, c.cleaner); err != nil {
			return err
		}
	}
	if c.maxRSS > 0 {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := watchRSS(ctx, c.maxRSS<<20, cancel)
		defer stop()
	}
	if err := produce(ctx, seeds, c); err != nil {
		return err
	}
	all := map[string]contestant{
		"kandle":         {"kandle", runKandle(c.partitions, true)},
		"kandle-unfused": {"kandle-unfused", runKandle(c.partitions, false)},
		"naive":          {"naive", runNaive},
		"goka":           {"goka", runGoka(c.partitions)},
	}
	var cs []contestant
	for _, name := range strings.Split(c.only, ",") {
		ct, ok := all[strings.TrimSpace(name)]
		if !ok {
			return fmt.Errorf("unknown contestant %q (choose from kandle, kandle-unfused, naive, goka)", name)
		}
		cs = append(cs, ct)
	}
	rates, cpuRates := map[string][]float64{}, map[string][]float64{}
	for r := range c.runs {
		for _, ct := range cs {
			stopProfile, err := startProfile(c.cpuprofile, ct.name, r)
			if err != nil {
				return err
			}
			rctx, cancel := context.WithTimeout(ctx, c.timeout)
			start, cpu0 := time.Now(), processCPU()
			err = ct.run(rctx, seeds, fmt.Sprintf("%s-%d", ct.name, r), c.n)
			el, cpu := time.Since(start), processCPU()-cpu0
			cancel()
			if perr := stopProfile(); err == nil {
				err = perr
			}
			if pe, ok := errors.AsType[progressError](err); ok {
				if n, _ := pe.progress(); n > 0 {
					fmt.Fprintf(os.Stderr, "round %d: %-14s given up after %.3fs with %d trades committed: %.0f trades/s, %.0f trades/cpu-s so far, rss %s\n",
						r+1, ct.name, el.Seconds(), n, float64(n)/el.Seconds(), float64(n)/cpu.Seconds(), rss())
				}
			}
			if cause := context.Cause(ctx); cause != nil {
				err = cause
			}
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", ct.name, r+1, err)
			}
			rate, cpuRate := float64(c.n)/el.Seconds(), float64(c.n)/cpu.Seconds()
			rates[ct.name] = append(rates[ct.name], rate)
			cpuRates[ct.name] = append(cpuRates[ct.name], cpuRate)
			fmt.Fprintf(os.Stderr, "round %d: %-14s %8.3fs %12.0f trades/s %12.0f trades/cpu-s%s, rss %s\n", r+1, ct.name, el.Seconds(), rate, cpuRate, emitted(ctx, seeds, fmt.Sprintf("%s-%d.candles", ct.name, r)), rss())
		}
	}
	return table(out, c, cs, rates, cpuRates)
}

func produce(ctx context.Context, seeds []string, c config) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(1<<20))
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := kafka.EnsureTopics(ctx, cl, []kafka.TopicSpec{{Name: "trades", Partitions: int32(c.partitions)}}); err != nil {
		return fmt.Errorf("create the trades topic: %w", err)
	}
	cfg := gen.DefaultConfig()
	cfg.Symbols = make([]string, c.symbols)
	for i := range cfg.Symbols {
		cfg.Symbols[i] = fmt.Sprintf("SYM%04d", i)
	}
	cfg.Count, cfg.Span, cfg.Start = c.n, c.span, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g, err := gen.New(cfg)
	if err != nil {
		return err
	}
	start := time.Now()
	n, err := gen.Produce(ctx, cl, "trades", g, 0)
	if err != nil {
		return fmt.Errorf("produce the trades: %w", err)
	}
	fmt.Fprintf(os.Stderr, "produced %d trades over %d symbols in %s, rss %s\n", n, c.symbols, time.Since(start).Round(time.Millisecond), rss())
	return nil
}

// waitCommitted polls the groups' lag every 20 ms until every group has
// committed every offset of the topics it consumes, all in one look (the
// committed offsets are fetched before the end offsets, so a stage that is
// done is never judged against an input its upstream is still writing),
// or run returns first.
func waitCommitted(ctx context.Context, cl *kgo.Client, groups []string, run <-chan error) error {
	adm := kadm.NewClient(cl)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last kadm.DescribedGroupLags
	for {
		select {
		case err := <-run:
			return fmt.Errorf("stopped before the end of the stream: %w", err)
		case <-ctx.Done():
			return progressError{err: ctx.Err(), lag: last}
		case <-tick.C:
		}
		lag, err := adm.Lag(ctx, groups...)
		if err != nil {
			continue
		}
		last = lag
		caughtUp := true
		for _, g := range groups {
			if l, ok := lag[g]; !ok || len(l.Lag) == 0 || l.Lag.Total() != 0 {
				caughtUp = false
			}
		}
		if caughtUp {
			return nil
		}
	}
}

// progressError is a run given up before its groups caught up, with how
// far the first of them (a peer's only group, kandle's first stage) had
// committed its input when last seen.
type progressError struct {
	err error
	lag kadm.DescribedGroupLags
}

func (e progressError) Error() string {
	committed, end := e.progress()
	return fmt.Sprintf("%v, with %d of %d input records committed", e.err, committed, end)
}

func (e progressError) Unwrap() error { return e.err }

func (e progressError) progress() (committed, end int64) {
	for _, name := range e.lag.Sorted() {
		for _, ps := range name.Lag {
			for _, l := range ps {
				committed += max(l.Commit.At, 0)
				end += l.End.Offset
			}
		}
		break
	}
	return committed, end
}

// emitted says how many candles a peer produced to topic (the naive peer and
// Goka run the same aggregation over the same trades, so the counts match).
func emitted(ctx context.Context, seeds []string, topic string) string {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return ""
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil || ends.Error() != nil {
		return ""
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return fmt.Sprintf(", %d candles", n)
}

// processCPU returns the CPU time (user and system) this process has used:
// the contestant's and the in-process broker's.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startProfile starts a CPU profile of one contestant's run when prefix is
// set, and returns the function that stops it.
func startProfile(prefix, name string, round int) (func() error, error) {
	if prefix == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(fmt.Sprintf("%s.%s.%d.prof", prefix, name, round+1))
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

func median(rs []float64) float64 {
	s := append([]float64(nil), rs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// table prints the median rate of each contestant and its ratio to the
// others, and the median trades per CPU-second of the process (contestant
// and in-process broker), which a loaded machine disturbs less than the
// wall clock; then kandle's ratio to each peer: of the medians, per round
// (the contestants of a round ran one after the other) with the median of
// those, and of the medians per CPU-second.
func table(out io.Writer, c config, cs []contestant, rates, cpuRates map[string][]float64) error {
	med := map[string]float64{}
	for name, rs := range rates {
		med[name] = median(rs)
	}
	fmt.Fprintf(out, "%d trades, %d symbols, %d partitions, %d round(s); median trades/s\n", c.n, c.symbols, c.partitions, c.runs)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(w, "contestant\ttrades/s\t")
	for _, ct := range cs {
		fmt.Fprintf(w, "÷ %s\t", ct.name)
	}
	fmt.Fprintln(w, "runs\ttrades/cpu-s\t")
	for _, a := range cs {
		fmt.Fprintf(w, "%s\t%.0f\t", a.name, med[a.name])
		for _, b := range cs {
			fmt.Fprintf(w, "%.2f×\t", med[a.name]/med[b.name])
		}
		var rs []string
		for _, r := range rates[a.name] {
			rs = append(rs, fmt.Sprintf("%.0f", r))
		}
		fmt.Fprintf(w, "%s\t%.0f\t\n", strings.Join(rs, " "), median(cpuRates[a.name]))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	k, ok := rates["kandle"]
	if !ok {
		return nil
	}
	for _, b := range cs {
		if b.name == "kandle" {
			continue
		}
		var rounds []string
		var ratios []float64
		for i, r := range rates[b.name] {
			ratios = append(ratios, k[i]/r)
			rounds = append(rounds, fmt.Sprintf("%.2f×", k[i]/r))
		}
		fmt.Fprintf(out, "kandle ÷ %s: %.2f× trades/s (of the medians; per round %s, their median %.2f×), %.2f× trades/cpu-s\n", b.name,
			med["kandle"]/med[b.name], strings.Join(rounds, " "), median(ratios), median(cpuRates["kandle"])/median(cpuRates[b.name]))
	}
	return nil
}

// quiet is the logger for the contestants: errors only.
func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}
