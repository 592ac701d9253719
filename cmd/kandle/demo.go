package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/gen"
	"github.com/kandle/kandle/serve"
	"github.com/kandle/kandle/topology"
)

func cmdDemo(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "demo", "[flags]",
		"Starts the embedded dev broker, the crypto topology (1m candles rolled up to 1M) and a trade generator:\n"+
			"first a backlog of the last -backlog of trades (so candles appear at once), then live trades at -rate.\n"+
			"Closed candles are printed as a table while it runs, and kandle serve's chart page shows them live\n"+
			"(from an in-memory store fed by the output topics and the processors: no other service needed).\n"+
			"Stop with Ctrl-C.")
	top := topologyFlag(fs)
	backlog := fs.Duration("backlog", 30*time.Minute, "event-time span of the historical trades sent first")
	backlogCount := fs.Int("backlog-trades", 20000, "number of historical trades")
	rate := fs.Float64("rate", 50, "live trades per second after the backlog")
	duration := fs.Duration("duration", 0, "stop after this long (0 = run until Ctrl-C)")
	show := fs.String("show", "1m,5m,15m,1h", "timeframes whose closed candles are printed")
	serveAddr := fs.String("serve", "127.0.0.1:8080", "where the chart page and candle API listen (\"\" turns them off; :0 picks a free port)")
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
	// The chart's store: closed candles from the output topics (below),
	// open candles from every processor.
	mem := serve.NewMemory(demoHistory)
	opts := []engine.Option{engine.WithLogger(e.log), engine.WithRegisterer(prometheus.NewRegistry()),
		engine.WithDevBrokerListen("127.0.0.1:0"), engine.WithInstanceID("demo")}
	for _, name := range slices.Sorted(maps.Keys(t.Processors)) {
		opts = append(opts, engine.WithLive(name, mem))
	}
	eng, err := engine.New(t, opts...)
	if err != nil {
		return err
	}
	var srv *serve.Server
	var ln net.Listener
	if *serveAddr != "" {
		if srv, err = demoServer(e, t, mem); err != nil {
			return err
		}
		if ln, err = listen(*serveAddr); err != nil {
			return fmt.Errorf("demo: chart page: listen on %s: %w; pick another address with -serve (or -serve \"\" to skip it)", *serveAddr, err)
		}
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
	src := t.Sources[slices.Sorted(maps.Keys(t.Sources))[0]]
	where := "the embedded broker"
	if !t.Brokers.Embedded() {
		where = "broker"
	}
	fmt.Fprintf(e.stdout, "kandle demo: topology %q on %s %s; trades go to %q. Ctrl-C stops.\n",
		t.Name, where, seeds[0], src.Topic)
	if srv != nil {
		fmt.Fprintf(e.stdout, "kandle demo: live chart at %s\n", pageURL(ln.Addr()))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Run(ctx, ln); err != nil && ctx.Err() == nil {
				cancel(err)
			}
		}()
	}
	fmt.Fprintln(e.stdout)

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
	go func() { defer wg.Done(); printCandles(ctx, e, t, seeds, sec, splitList(*show), mem) }()
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

// demoHistory is how many closed candles per series the demo's chart store
// keeps (about 3.5 days of 1m candles).
const demoHistory = 5000

// demoServer is kandle serve over the demo's in-memory store.
func demoServer(e *env, t *topology.Topology, mem *serve.Memory) (*serve.Server, error) {
	tfs := map[string]candle.Timeframe{}
	for _, name := range slices.Sorted(maps.Keys(t.Processors)) {
		p := t.Processors[name]
		if _, ok := tfs[p.Timeframe]; !ok {
			tfs[p.Timeframe] = t.TimeframeOf(p)
		}
	}
	return serve.New(serve.Options{Config: t.Serve, Timeframes: tfs, Hot: mem, Live: mem, Feed: mem, Log: e.log})
}

// printCandles tails the output topics (read committed, as any downstream
// reader would), prints one row per candle of the shown timeframes and
// adds every candle to the chart's store.
func printCandles(ctx context.Context, e *env, t *topology.Topology, seeds []string, sec []kgo.Opt, show []string, mem *serve.Memory) {
	var topics []string
	want := map[string]bool{}
	for _, tf := range show {
		want[tf] = true
	}
	for _, name := range slices.Sorted(maps.Keys(t.Processors)) {
		topics = append(topics, t.Processors[name].Output.Topic)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, sec...)...)
	if err != nil {
		e.log.Error("candle reader", "err", err)
		return
	}
	defer cl.Close()
	fmt.Fprintf(e.stdout, "%-4s %-8s %-16s %-16s %12s %12s %12s %12s %12s %12s %6s\n",
		"TF", "SYMBOL", "OPEN TIME (UTC)", "CLOSE TIME", "OPEN", "HIGH", "LOW", "CLOSE", "VOLUME", "TAKER BUY", "TRADES")
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		var rows []candle.Candle
		fs.EachRecord(func(r *kgo.Record) {
			if engine.IsQuietRecord(r) {
				return // rollups' control record, not a candle
			}
			if c, err := candle.ParseJSON(r.Value); err == nil {
				rows = append(rows, c)
			}
		})
		sort.SliceStable(rows, func(i, j int) bool { return rows[i].OpenTime < rows[j].OpenTime })
		mem.Add(rows...)
		for _, c := range rows {
			if !want[c.Timeframe] {
				continue
			}
			gap, takerBuy := "", "-" // "-": the source maps no aggressor side
			if c.Gap {
				gap = " gap"
			}
			if c.Rev > 0 { // a revision of a closed window (revise_within)
				gap += " rev " + strconv.FormatUint(uint64(c.Rev), 10)
			}
			if c.Taker {
				takerBuy = c.TakerBuyVolume.String()
			}
			fmt.Fprintf(e.stdout, "%-4s %-8s %-16s %-16s %12s %12s %12s %12s %12s %12s %6d%s\n",
				c.Timeframe, c.Symbol, time.UnixMilli(c.OpenTime).UTC().Format("2006-01-02 15:04"),
				time.UnixMilli(c.CloseTime).UTC().Format("15:04"), c.Open, c.High, c.Low, c.Close, c.Volume, takerBuy, c.Trades, gap)
		}
	}
}
