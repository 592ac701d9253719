package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/topology"
)

func cmdReplay(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "replay", "-t topology.yaml [--from X] [--to Y] [--partitions 0,3] [--processors 5m,1h] [--out topics|FILE|-]",
		"Reads a bounded range of the topology's sources without joining any consumer group and runs it through\n"+
			"the processors in process. The result depends only on the input: watermarks never advance by the wall\n"+
			"clock, and the future guard compares with the time the replay started. A mid-stream --from reads a\n"+
			"warm-up before it so every key knows its previous close; candles opening before --from are not written.\n\n"+
			"A replay reads every partition up to --to (or to the end offsets taken when it starts), however long the\n"+
			"broker takes to deliver them; it never stops early because records are slow to come. When the brokers do\n"+
			"not answer at all for --timeout (unreachable, down), it fails with exit status 1 instead of writing a\n"+
			"partial result. --out topics creates missing output and dead-letter topics before it reads anything.")
	top := topologyFlag(fs)
	brokers := brokersFlag(fs)
	from := fs.String("from", "earliest", "start: earliest, an offset (on every partition), or an RFC 3339 time (Kinesis: earliest or a time, by arrival)")
	to := fs.String("to", "end", "end (exclusive): end (the end offsets seen at start), an offset, or an RFC 3339 time (Kinesis: end or a time; each shard stops at its first record that arrived at or after it)")
	parts := fs.String("partitions", "", "comma-separated source partitions to replay (default all)")
	procs := fs.String("processors", "", "comma-separated processors whose candles and dead letters are written (default all; every processor still runs, so rollups get their input)")
	out := fs.String("out", "topics", "where results go: topics (the topology's output and dead-letter topics), a file path, or - for stdout (JSON lines)")
	timeout := fs.Duration("timeout", engine.DefaultReplayTimeout, "fail when the brokers give no answer at all for this long (slow answers are waited for)")
	warmup := fs.Duration("warmup", 0, "history read before a mid-stream --from (default: the longest window of the topology plus its lateness)")
	if err := e.parseNoArgs(fs, args); err != nil {
		return err
	}
	t, err := loadTopology(*top)
	if err != nil {
		return reportTopology(e, err)
	}
	var seeds []string
	kinesisOnly := !slices.ContainsFunc(slices.Collect(maps.Values(t.Sources)), func(s *topology.Source) bool { return !s.IsKinesis() })
	if *out == "topics" || !kinesisOnly { // a Kinesis-only replay to a file needs no broker
		if seeds, err = standaloneBrokers(t, *brokers); err != nil {
			return err
		}
	}
	if *timeout <= 0 {
		return fmt.Errorf("--timeout must be positive (e.g. 1m), got %s", *timeout)
	}
	o := engine.ReplayOptions{Started: time.Now(), Warmup: *warmup, Logger: e.log, Timeout: *timeout}
	if o.From, err = engine.ParseBound(*from); err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	if o.To, err = engine.ParseBound(*to); err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	o.Processors = splitList(*procs)
	for _, name := range o.Processors {
		if t.Processors[name] == nil {
			return fmt.Errorf("--processors: topology %s has no processor %q", t.Name, name)
		}
	}
	for _, p := range splitList(*parts) {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return fmt.Errorf("--partitions: %q is not a partition number", p)
		}
		o.Partitions = append(o.Partitions, int32(n))
	}
	switch *out {
	case "topics":
		if o.Out, err = engine.NewTopicOutput(ctx, t, seeds, *timeout, e.log); err != nil {
			return err
		}
	case "-":
		o.Out = &engine.WriterOutput{W: e.stdout}
	default:
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		o.Out = &engine.WriterOutput{W: f}
	}
	o.Progress = progressPrinter(e)
	p, err := engine.Replay(ctx, t, seeds, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "replay done: %d records in %s\n", p.Records, p.Elapsed.Round(time.Millisecond))
	return nil
}

// progressPrinter draws a progress bar on a terminal and logs lines otherwise.
func progressPrinter(e *env) func(engine.Progress) {
	tty := e.stderr == os.Stderr && isTerminal(os.Stderr)
	return func(p engine.Progress) {
		rate := float64(p.Records) / max(p.Elapsed.Seconds(), 0.001)
		eta := "?"
		if rate > 0 && p.Total > p.Records {
			eta = (time.Duration(float64(p.Total-p.Records)/rate) * time.Second).Round(time.Second).String()
		}
		var lag []string
		keys := make([]int, 0, len(p.Lag))
		for k := range p.Lag {
			keys = append(keys, int(k))
		}
		sort.Ints(keys)
		for _, k := range keys {
			lag = append(lag, fmt.Sprintf("p%d→%d", k, p.Lag[int32(k)]))
		}
		pct := 100.0
		if p.Total > 0 {
			pct = 100 * float64(p.Records) / float64(p.Total)
		}
		if tty {
			width := 30
			fill := int(pct / 100 * float64(width))
			fmt.Fprintf(e.stderr, "\r[%s%s] %5.1f%% %d/%d records %.0f rec/s ETA %s %s\033[K",
				strings.Repeat("#", fill), strings.Repeat(".", width-fill), pct, p.Records, p.Total, rate, eta, strings.Join(lag, " "))
			if p.Lag == nil {
				fmt.Fprintln(e.stderr)
			}
			return
		}
		e.log.Info("replay progress", "records", p.Records, "total", p.Total, "percent", fmt.Sprintf("%.1f", pct),
			"records_per_s", int(rate), "eta", eta, "end_offsets_left", strings.Join(lag, " "))
	}
}
