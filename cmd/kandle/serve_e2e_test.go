package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/serve"
)

// TestServeEqualsTopics is the read side's correctness property: after a
// pipeline wrote its candles to DynamoDB (dynalite), the S3 Parquet lake
// (in-process S3) and Valkey (redis-server), kandle serve's API returns,
// for many random ranges, limits and orders followed page by page through
// the cursor, exactly the candles on the output topics, plus the open
// window from the active hash. The hot horizon puts the hot/cold boundary
// in the middle of the data, so ranges cross it.
//
// The processors run as shipped (lateness, idle_timeout, max_future): the
// history is the last hours before the wall clock, produced at once as a
// backlog; once caught up, the idle advance closes every window of it. The
// open window comes from a trade stamped with the wall clock in the first
// 40 s of its minute, so it is still open (the idle advance closes it idle_timeout +
// lateness after the minute ends) while serve's answers are compared.
func TestServeEqualsTopics(t *testing.T) {
	testkit.WallClockTest(t)
	h := newSXHarness(t)
	defer h.shutdown()
	cfg := sxStream(3000, 100*time.Minute)
	// H (sxHourEnd) is then 1 to 2 hours before now: the closers, stamped
	// lateness after H, and every key's run of gap candles (max_idle after
	// its last trade) are in the past, so no record is future or late and
	// the candles settle before the open window.
	cfg.Start = time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	h.startRun()
	h.produce(cfg, 0)
	h.waitClosed(cfg, 40*time.Second)
	truth := h.waitSettled(cfg, 40*time.Second)
	h.waitSinks(truth, wantLedger(t, cfg), 30*time.Second)
	H := sxHourEnd(cfg)

	// kandle serve's own wiring over the topology's sinks.
	top, err := loadTopology(h.top)
	if err != nil {
		t.Fatal(err)
	}
	top.Serve.Hot, top.Serve.Cold, top.Serve.Live = "history", "lake", "live"
	top.Serve.HotHorizon = time.Hour
	e := &env{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler), logLevel: new(slog.LevelVar)}
	o, closeStores, err := serveOptions(h.ctx, e, top, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStores()
	now := time.UnixMilli(H).Add(10 * time.Minute) // boundary at H − 50m; the history spans H − 2h .. H
	o.Now = func() time.Time { return now }
	srv, err := serve.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Run(ctx, ln) })
	defer func() { cancel(); wg.Wait() }()
	base := "http://" + ln.Addr().String()

	// One more trade, stamped with the wall clock, opens the window at M for
	// one symbol (a new run: its last one ended max_idle after its last
	// trade). The idle advance moves the watermark to the clock −
	// idle_timeout − lateness, so the window stays open until idle_timeout +
	// lateness after the minute ends (M + 67s as shipped) and lives only in
	// the active hash; it is sent in the first 40 seconds of a minute, so
	// the comparisons below (about 2 s, 10 s on a loaded machine) have at
	// least 27 s to fit in it, and the check after them fails loudly if they
	// did not.
	if n := time.Now(); n.Sub(n.Truncate(time.Minute)) > 40*time.Second {
		time.Sleep(n.Truncate(time.Minute).Add(time.Minute + 50*time.Millisecond).Sub(n)) // wait for the wall clock, not for a condition
	}
	sym := cfg.Symbols[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.broker), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ts := time.Now().UnixMilli()
	M := ts - ts%60_000
	v := fmt.Sprintf(`{"symbol":%q,"ts":%d,"price":"123.45","qty":"0.5","trade_id":"open-1","side":"buy"}`, sym, ts)
	if err := cl.ProduceSync(h.ctx, &kgo.Record{Topic: "trades", Key: []byte(sym), Value: []byte(v)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	open := candle.Candle{Symbol: sym, Timeframe: "1m", OpenTime: M, CloseTime: M + 60_000,
		Open: decimal.MustParse("123.45"), High: decimal.MustParse("123.45"), Low: decimal.MustParse("123.45"),
		Close: decimal.MustParse("123.45"), Volume: decimal.MustParseSum("0.5"), QuoteVolume: decimal.MustParseSum("61.725"), Trades: 1,
		FirstTradeID: "open-1", LastTradeID: "open-1",
		Taker: true, TakerBuyVolume: decimal.MustParseSum("0.5"), TakerBuyQuoteVolume: decimal.MustParseSum("61.725")}
	for deadline := time.Now().Add(20 * time.Second); ; {
		got, _ := h.vk.Do(h.ctx, h.vk.B().Hget().Key("candle:active:1m:"+sym).Field("open_time").Build()).ToString()
		if got == fmt.Sprint(M) {
			break
		}
		h.running()
		if time.Now().After(deadline) {
			t.Fatalf("the open window never reached the active hash (open_time %q)", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	truth[sxKey(open)] = open
	began := time.Now()

	bySeries := map[[2]string][]candle.Candle{}
	for _, c := range truth {
		k := [2]string{c.Symbol, c.Timeframe}
		bySeries[k] = append(bySeries[k], c)
	}
	for _, cs := range bySeries {
		sort.Slice(cs, func(i, j int) bool { return cs[i].OpenTime < cs[j].OpenTime })
	}
	r := rand.New(rand.NewPCG(11, 12))
	lo, hi := H-3*3_600_000, M+3_600_000
	crossed, withOpen := 0, 0
	for i := 0; i < 120; i++ {
		s := cfg.Symbols[r.IntN(len(cfg.Symbols))]
		if i%4 == 0 {
			s = sym // the series with an open window
		}
		tf := []string{"1m", "1m", "5m", "1h"}[r.IntN(4)]
		from := lo + r.Int64N(hi-lo)
		to := from + 1 + r.Int64N(hi-from)
		if i%8 == 0 { // a range holding the open window
			tf, from = "1m", lo+r.Int64N(M-lo)
			to = M + 1 + r.Int64N(hi-M)
		}
		if s == sym && tf == "1m" && from <= M && to > M {
			withOpen++
		}
		limit := 1 + r.IntN(300)
		order := []string{"asc", "desc"}[r.IntN(2)]
		var want []string
		for _, c := range bySeries[[2]string{s, tf}] {
			if c.OpenTime >= from && c.OpenTime < to {
				want = append(want, string(serve.AppendCandle(nil, &c, !(c.Symbol == sym && c.Timeframe == "1m" && c.OpenTime == M))))
			}
		}
		if order == "desc" {
			slices.Reverse(want)
		}
		if b := now.Add(-time.Hour).UnixMilli(); from < b && to > b {
			crossed++
		}
		q := fmt.Sprintf("%s/v1/candles?symbol=%s&timeframe=%s&start=%d&end=%d&limit=%d&order=%s", base, url.QueryEscape(s), tf, from, to, limit, order)
		var got []string
		for pages := 0; ; pages++ {
			resp, err := http.Get(q)
			if err != nil {
				t.Fatal(err)
			}
			var p struct {
				Candles    []json.RawMessage `json:"candles"`
				NextCursor string            `json:"next_cursor"`
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || json.Unmarshal(body, &p) != nil {
				t.Fatalf("%s: %d %s", q, resp.StatusCode, body)
			}
			for _, c := range p.Candles {
				got = append(got, string(c))
			}
			if p.NextCursor == "" {
				break
			}
			if pages > 1000 {
				t.Fatal("the cursor never ends")
			}
			q = fmt.Sprintf("%s/v1/candles?cursor=%s&limit=%d", base, p.NextCursor, limit)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s %s [%d, %d) limit %d %s: got %d candles, want %d\nfirst difference: %s",
				s, tf, from, to, limit, order, len(got), len(want), firstDiff(got, want))
		}
	}
	if crossed < 20 {
		t.Fatalf("only %d ranges crossed the hot/cold boundary", crossed)
	}
	if withOpen < 15 {
		t.Fatalf("only %d ranges held the open window", withOpen)
	}
	// The window was open through every comparison: the 1m topic still
	// lacks it (closing is for good); and no trade was late or future.
	for _, r := range testkit.ReadTopic(t, []string{h.broker}, "sx.1m") {
		if c, err := candle.ParseJSON(r.Value); err == nil && sxKey(c) == sxKey(open) {
			t.Fatalf("the open window closed while serve's answers were compared (%v after it opened at %s); the comparisons must fit in it",
				time.Since(began), time.UnixMilli(M).UTC().Format(time.TimeOnly))
		}
	}
	// A duplicate of a trade whose window closed is late by design; a trade
	// late at its first copy is not.
	first := map[string]int64{} // partition and record → its first offset
	for _, r := range testkit.ReadTopic(t, []string{h.broker}, "trades") {
		if k := fmt.Sprint(r.Partition, string(r.Value)); first[k] == 0 {
			first[k] = r.Offset + 1
		}
	}
	for _, r := range testkit.ReadTopic(t, []string{h.broker}, "sx.dlq") {
		var d struct {
			Reason    string `json:"reason"`
			Partition int32  `json:"partition"`
			Offset    int64  `json:"offset"`
			Record    string `json:"record"`
		}
		if err := json.Unmarshal(r.Value, &d); err != nil {
			t.Fatalf("dead letter %s: %v", r.Value, err)
		}
		if d.Reason == "future" || d.Reason == "late" && first[fmt.Sprint(d.Partition, d.Record)] == d.Offset+1 {
			t.Errorf("a trade was dead-lettered %s: %s", d.Reason, r.Value)
		}
	}
	t.Logf("%d ranges compared in %v, %d crossing the hot/cold boundary, %d holding the open window", 120, time.Since(began), crossed, withOpen)
	if reads, bytes := o.Cold.(coldStore).r.ReadStats(); reads == 0 || bytes == 0 {
		t.Fatalf("the lake was never read (%d reads, %d bytes): ranges older than the horizon must come from cold", reads, bytes)
	}
}

// TestServeCommand runs `kandle serve` as users do: it prints the chart
// page's URL, answers the API from the topology's stores, refuses requests
// without the token, and stops at startup when the token variable is unset.
func TestServeCommand(t *testing.T) {
	redis := testkit.Redis(t)
	top := writeFile(t, "serve.yaml", fmt.Sprintf(`name: sv
brokers: [127.0.0.1:9] # serve reads the stores only; it never dials the brokers
sources:
  trades: {topic: trades, symbols: [BTC-USD, ETH-USD]}
processors:
  1m: {kind: candles, from: trades, timeframe: 1m}
  5m: {kind: rollup, from: 1m, timeframe: 5m}
sinks:
  live: {kind: valkey, from: [1m, 5m], addrs: [%q]}
serve:
  listen: 127.0.0.1:0
  auth_token_env: SV_TOKEN
`, redis.Addr))
	var out sxBuffer
	if code := realMain(context.Background(), []string{"serve", "-t", top}, &out, &out); code == 0 || !strings.Contains(out.String(), "SV_TOKEN is unset or empty; export SV_TOKEN=") {
		t.Fatalf("without the token variable: exit %d\n%s", code, out.String())
	}
	t.Setenv("SV_TOKEN", "tok")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	out = sxBuffer{}
	code := -1
	wg.Go(func() { code = realMain(ctx, []string{"serve", "-t", top}, &out, &out) })
	var base string
	re := regexp.MustCompile(`chart page at (http://\S+)/ `)
	for deadline := time.Now().Add(20 * time.Second); base == ""; {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no URL printed:\n%s", out.String())
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if c, b := get("/v1/timeframes", ""); c != 401 {
		t.Errorf("without token: %d %s", c, b)
	}
	if c, b := get("/v1/timeframes", "tok"); c != 200 || b != `{"timeframes":["1m","5m"],"derived":["3m","15m","30m","1h","2h","4h","6h","12h","1d","3d","1w","1M"]}`+"\n" {
		t.Errorf("timeframes: %d %s", c, b)
	}
	if c, b := get("/v1/symbols", "tok"); c != 200 || b != `{"symbols":["BTC-USD","ETH-USD"]}`+"\n" {
		t.Errorf("symbols: %d %s", c, b)
	}
	if c, b := get("/v1/candles?symbol=BTC-USD&timeframe=1m", "tok"); c != 200 || !strings.Contains(b, `"candles":[]`) {
		t.Errorf("no candles yet: %d %s", c, b)
	}
	if c, _ := get("/", ""); c != 200 {
		t.Errorf("chart page: %d", c)
	}
	if c, b := get("/metrics", ""); c != 200 || !strings.Contains(b, "kandle_serve_requests_total") {
		t.Errorf("metrics: %d", c)
	}
	cancel()
	wg.Wait()
	if code != 0 {
		t.Errorf("serve exited %d after Ctrl-C:\n%s", code, out.String())
	}
}
