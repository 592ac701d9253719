package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/gen"
	"github.com/kandle/kandle/topology"
)

func cmdDemo(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "demo", "[flags]",
		"Starts the embedded dev broker, the crypto topology (1m candles rolled up to 1M) and a trade generator:\n"+
			"first a backlog of the last -backlog of trades (so candles appear at once), then live trades at -rate.\n"+
			"Closed candles are printed as a table while it runs. Stop with Ctrl-C.")
	top := topologyFlag(fs)
	backlog := fs.Duration("backlog", 30*time.Minute, "event-time span of the historical trades sent first")
	backlogCount := fs.Int("backlog-trades", 20000, "number of historical trades")
	rate := fs.Float64("rate", 50, "live trades per second after the backlog")
	duration := fs.Duration("duration", 0, "stop after this long (0 = run until Ctrl-C)")
	show := fs.String("show", "1m,5m,15m,1h", "timeframes whose closed candles are printed")
	if err := e.parseNoArgs(fs, args); err != nil {
		return err
	}
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	t, err := loadTopology(*top)
	if err != nil {
		return reportTopology(e, err)
	}
	e.logLevel.Set(max(e.logLevel.Level(), slog.LevelWarn)) // the table is the output
	eng, err := engine.New(t, engine.WithLogger(e.log), engine.WithRegisterer(prometheus.NewRegistry()),
		engine.WithDevBrokerListen("127.0.0.1:0"), engine.WithInstanceID("demo"))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	var runErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		runErr = eng.Run(ctx)
		cancel(runErr)
	}()
	defer wg.Wait()
	seeds, err := waitBrokers(ctx, eng)
	if err != nil {
		return err
	}
	src := t.Sources[sortedKeys(t.Sources)[0]]
	where := "the embedded broker"
	if !t.Brokers.Embedded() {
		where = "broker"
	}
	fmt.Fprintf(e.stdout, "kandle demo: topology %q on %s %s; trades go to %q. Ctrl-C stops.\n\n",
		t.Name, where, seeds[0], src.Topic)

	// A topology that lists brokers runs the demo on them: connect the way
	// the engine does (the embedded broker needs nothing).
	sec, err := kafka.ClientOpts(t.Kafka)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, sec...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	wg.Add(2)
	go func() { defer wg.Done(); printCandles(ctx, e, t, seeds, sec, splitList(*show)) }()
	go func() {
		defer wg.Done()
		now := time.Now()
		hist := gen.DefaultConfig()
		hist.Count, hist.Span, hist.Start = *backlogCount, *backlog, now.Add(-*backlog)
		hist.DupRate, hist.MalformedRate = 0.01, 0.005
		g, err := gen.New(hist)
		if err == nil {
			_, err = gen.Produce(ctx, cl, src.Topic, g, 0)
		}
		live := gen.DefaultConfig()
		live.Count, live.Span, live.Rate, live.Start, live.Seed = 0, 0, *rate, time.Now(), 2
		if err == nil {
			if g, err = gen.New(live); err == nil {
				_, err = gen.Produce(ctx, cl, src.Topic, g, g.Interval())
			}
		}
		if err != nil && ctx.Err() == nil {
			e.log.Error("generator stopped", "err", err)
		}
	}()
	<-ctx.Done()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

func waitBrokers(ctx context.Context, eng *engine.Engine) ([]string, error) {
	for {
		if b := eng.Brokers(); len(b) > 0 {
			return b, nil
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// printCandles tails the output topics of the shown timeframes (read
// committed, as any downstream reader would) and prints one row per candle.
func printCandles(ctx context.Context, e *env, t *topology.Topology, seeds []string, sec []kgo.Opt, show []string) {
	var topics []string
	want := map[string]bool{}
	for _, tf := range show {
		want[tf] = true
	}
	for _, name := range sortedKeys(t.Processors) {
		p := t.Processors[name]
		if want[p.Timeframe] {
			topics = append(topics, p.Output.Topic)
		}
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, sec...)...)
	if err != nil {
		e.log.Error("candle reader", "err", err)
		return
	}
	defer cl.Close()
	fmt.Fprintf(e.stdout, "%-4s %-8s %-16s %-16s %12s %12s %12s %12s %12s %6s\n",
		"TF", "SYMBOL", "OPEN TIME (UTC)", "CLOSE TIME", "OPEN", "HIGH", "LOW", "CLOSE", "VOLUME", "TRADES")
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		var rows []candle.Candle
		fs.EachRecord(func(r *kgo.Record) {
			if c, err := candle.ParseJSON(r.Value); err == nil {
				rows = append(rows, c)
			}
		})
		sort.SliceStable(rows, func(i, j int) bool { return rows[i].OpenTime < rows[j].OpenTime })
		for _, c := range rows {
			gap := ""
			if c.Gap {
				gap = " gap"
			}
			fmt.Fprintf(e.stdout, "%-4s %-8s %-16s %-16s %12s %12s %12s %12s %12s %6d%s\n",
				c.Timeframe, c.Symbol, time.UnixMilli(c.OpenTime).UTC().Format("2006-01-02 15:04"),
				time.UnixMilli(c.CloseTime).UTC().Format("15:04"), c.Open, c.High, c.Low, c.Close, c.Volume, c.Trades, gap)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
