package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	ddbsdk "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/parquet-go/parquet-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valkey-io/valkey-go"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/dynamodb"
	"github.com/kandle/kandle/connectors/s3parquet"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/gen"
	"github.com/kandle/kandle/internal/testkit"
)

// The sink tests run the whole path a deployment runs: trades on a dev
// broker, `kandle run` in process, candles on the output topics, and the
// four sinks of a topology (DynamoDB candle history, a DynamoDB raw trade
// ledger fed from the source, a Parquet lake on S3 and live Valkey hashes)
// against real servers. The output topics are the truth every sink is
// compared with, exactly.
//
// The candle processors run as shipped (lateness, idle_timeout,
// max_future), on hours of January 2026 history produced at once: a
// backlog, as after an outage, which these checks need (lake day
// partitions, TTLs, serve's hot and cold ranges). While a partition is
// behind its watermark moves only with event time; once it has caught up
// and stayed quiet for idle_timeout it advances by the wall clock (to
// now), which closes every window still open. max_idle (10m) ends each
// key's run of gap candles ten minutes of event time after its last trade,
// closing its rollup windows by quiet marks, so the candles settle to a
// fixed set (sxWantCounts) the checks compare exactly: the newest final
// candle is what each live hash must hold. After the stream one "closer"
// trade goes to every input partition, stamped lateness after a whole hour
// H, so every real symbol's hour before H closes even before the idle
// advance.

const sxTopology = `
name: sx
brokers: [%[1]s]
metrics: ""
commit_interval: 50ms
sources:
  trades: {topic: trades, partitions: 3, fields: {side: side}}  # kandle gen writes a side: taker volumes in every sink
processors:
  # Shipped lateness, idle_timeout and max_future; max_idle 10m makes the
  # candles settle after the input (see the comment above).
  1m: {kind: candles, from: trades, timeframe: 1m, max_idle: 10m, output: {topic: sx.1m, partitions: 2}}
  5m: {kind: rollup, from: 1m, timeframe: 5m, output: {topic: sx.5m, partitions: 2}}
  1h: {kind: rollup, from: 5m, timeframe: 1h, output: {topic: sx.1h, partitions: 1}}
dead_letter: {topic: sx.dlq}
sinks:
  history:
    kind: dynamodb
    from: [1m, 5m, 1h]
    endpoint: %[2]s
    provision: true
    table: {name: candles, ttl_attribute: expires_at}
    pk: "{symbol}#{timeframe}"
    sk: "{open_time}"
    ttl_by_timeframe: {1m: 7d, 5m: 30d}
    retry_max: 300ms
  ledger:
    kind: dynamodb
    from: [trades]
    endpoint: %[2]s
    provision: true
    table: {name: trades, sk_type: S, ttl_attribute: expires_at}
    pk: "{symbol}#{yyyy}-{mm}-{dd}-{hh}"
    sk: "{ts}#{trade_id}"
    ttl: 24h
    retry_max: 300ms
  lake:
    kind: s3parquet
    from: [1m, 5m, 1h]
    url: s3://bucket/lake
    endpoint: %[3]s
    path_style: true
    flush_age: 1s
    request_timeout: 2s
    max_backoff: 300ms
  live:
    kind: valkey
    from: [1m, 5m, 1h]
    addrs: [%[4]s]
    coalesce: 20ms
    timeout: 1s
`

var sxTopics = []string{"sx.1m", "sx.5m", "sx.1h"}

// sxHarness owns the servers and the kandle processes of one test.
type sxHarness struct {
	t          *testing.T
	ctx        context.Context
	wg         sync.WaitGroup
	broker     string
	top        string
	log        sxBuffer
	run        <-chan struct{}
	cancel     context.CancelFunc // stops everything kandle runs
	runWG      sync.WaitGroup     // kandle run
	stopRun    context.CancelFunc
	once       sync.Once
	stateDir   string   // kandle run's, kept across its restarts
	process    bool     // run kandle run as a child process
	runArgs    []string // more flags for kandle run
	brokerDir  string   // the dev broker's data, kept across its restarts
	stopBroker func()
	kill       func() // SIGKILL it (process mode)

	ddbAddr, ddbDir     string
	ddb                 *testkit.Service
	redisAddr, redisDir string
	redis               *testkit.Service
	s3                  *sxS3
	vk                  valkey.Client
}

func newSXHarness(t *testing.T) *sxHarness { return newSXHarnessWith(t, nil) }

// newSXHarnessWith is newSXHarness with edit applied to the topology text
// (a test that needs other settings says why).
func newSXHarnessWith(t *testing.T, edit func(top string) string) *sxHarness {
	ctx, cancel := context.WithCancel(context.Background())
	h := &sxHarness{t: t, ctx: ctx, cancel: cancel}
	t.Cleanup(h.shutdown)

	h.broker, h.brokerDir = fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t)), t.TempDir()
	h.startBroker()
	// Dynalite keeps its tables on disk and Redis appends every write, so a
	// server restarted on the same port and folder has all its data: the
	// outage checks can then be exact instead of "at least what came after".
	h.ddbAddr, h.ddbDir = fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t)), t.TempDir()
	h.redisAddr, h.redisDir = fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t)), t.TempDir()
	h.startDynalite()
	h.startRedis()
	h.s3 = newSXS3(t, "bucket")
	waitTCP(t, h.broker)

	vk, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{h.redisAddr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vk.Close)
	h.vk = vk
	top := fmt.Sprintf(sxTopology, h.broker, "http://"+h.ddbAddr, h.s3.url(), h.redisAddr)
	if edit != nil {
		top = edit(top)
	}
	h.top = writeFile(t, "sx.yaml", top)
	return h
}

// shutdown stops kandle run, then the broker, before any server goes away
// (tests defer it; cleanups run after defers), so shutdown is quiet.
func (h *sxHarness) shutdown() {
	h.once.Do(func() {
		if h.stopRun != nil {
			h.stopRun()
		}
		h.runWG.Wait()
		h.cancel()
		h.wg.Wait()
		if h.t.Failed() {
			h.t.Logf("kandle log (tail):\n%s", sxTail(h.log.String(), 6000))
		}
	})
}

// startRun starts `kandle run` on the topology (again: same instance and
// state folder, as a restarted deployment would): in process, or with
// h.process as a child process that can be SIGKILLed.
func (h *sxHarness) startRun() {
	if h.stateDir == "" {
		h.stateDir = h.t.TempDir()
	}
	// A short session lets a killed member's partitions move on sooner.
	args := []string{"run", "-t", h.top, "-state-dir", h.stateDir, "-instance", "sx", "-session-timeout", "6s"}
	args = append(args, h.runArgs...)
	if !h.process {
		ctx, cancel := context.WithCancel(h.ctx)
		h.stopRun = cancel
		h.run = h.goKandle(ctx, &h.runWG, args...)
		return
	}
	// The test binary runs kandle's main when asKandleEnv is set (TestMain).
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asKandleEnv+"=1")
	cmd.Stdout, cmd.Stderr = &h.log, &h.log
	cmd.SysProcAttr = testkit.ChildAttr(false)
	if err := cmd.Start(); err != nil {
		h.t.Fatalf("start kandle run: %v", err)
	}
	done := make(chan struct{})
	h.runWG.Add(1)
	go func() {
		defer h.runWG.Done()
		defer close(done)
		_ = cmd.Wait()
	}()
	h.run, h.kill = done, func() { _ = cmd.Process.Kill() }
	h.stopRun = func() { // SIGTERM, then SIGKILL if it hangs
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			h.t.Errorf("kandle run took over 20 s to stop after SIGTERM")
			_ = cmd.Process.Kill()
		}
	}
}

// crashRun SIGKILLs the kandle run process and starts a new one.
func (h *sxHarness) crashRun() {
	h.kill()
	h.runWG.Wait()
	h.startRun()
}

// goKandle runs a kandle command until ctx ends; the channel closes when
// it exits.
func (h *sxHarness) goKandle(ctx context.Context, wg *sync.WaitGroup, args ...string) <-chan struct{} {
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		if code := realMain(ctx, args, &h.log, &h.log); code != 0 && ctx.Err() == nil {
			h.t.Errorf("kandle %s exited with %d", args[0], code)
		}
	}()
	return done
}

// running fails the test when kandle run has exited.
func (h *sxHarness) running() {
	select {
	case <-h.run:
		h.t.Fatal("kandle run exited early (see its log below)")
	default:
	}
}

// startBroker starts the dev broker on h.broker, keeping its topics in
// h.brokerDir so a restarted broker has them; stopBroker ends it.
func (h *sxHarness) startBroker() {
	ctx, cancel := context.WithCancel(h.ctx)
	done := h.goKandle(ctx, &h.wg, "dev-broker", "--listen", h.broker, "--partitions", "3", "--topics", "trades", "--data-dir", h.brokerDir)
	h.stopBroker = func() { cancel(); <-done }
}

func (h *sxHarness) startDynalite() {
	bin := filepath.Join(testkit.EmuDir(h.t), "node_modules", ".bin", "dynalite")
	_, port, _ := net.SplitHostPort(h.ddbAddr)
	h.ddb = testkit.Start(h.t, "dynalite", h.ddbAddr, sxTCPReady(h.ddbAddr), "node", []string{bin, "--host", "127.0.0.1",
		"--port", port, "--path", h.ddbDir, "--createTableMs", "20", "--deleteTableMs", "20", "--updateTableMs", "20"})
}

func (h *sxHarness) startRedis() {
	_, port, _ := net.SplitHostPort(h.redisAddr)
	h.redis = testkit.Start(h.t, "redis-server", h.redisAddr, sxTCPReady(h.redisAddr), "redis-server", []string{"--bind", "127.0.0.1",
		"--port", port, "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", h.redisDir})
}

func sxTCPReady(addr string) func() error {
	return func() error {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err
	}
}

// sxStream is the generated input: 4 symbols, duplicates and malformed
// records, disorder below the lateness (so no trade is late).
func sxStream(count int, span time.Duration) gen.Config {
	cfg := gen.DefaultConfig()
	cfg.Count, cfg.Span, cfg.Seed = count, span, 7
	cfg.Start = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	cfg.Disorder = 500 * time.Millisecond
	cfg.DupRate, cfg.MalformedRate = 0.03, 0.02
	return cfg
}

// produce sends cfg's records (one every pace), then the closers.
func (h *sxHarness) produce(cfg gen.Config, pace time.Duration) {
	t := h.t
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.broker), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Error(err)
		return
	}
	defer cl.Close()
	g, err := gen.New(cfg)
	if err != nil {
		t.Error(err)
		return
	}
	// Keyed like gen.Produce does (murmur2 of the symbol), records go out in
	// order so each partition is exactly as a keyed producer would write it.
	part := kgo.StickyKeyPartitioner(nil).ForTopic("trades")
	for {
		k, v, ok := g.Next()
		if !ok {
			break
		}
		r := &kgo.Record{Topic: "trades", Key: k, Value: v}
		r.Partition = int32(part.Partition(r, 3))
		if err := cl.ProduceSync(h.ctx, r).FirstErr(); err != nil {
			t.Errorf("produce: %v", err)
			return
		}
		if pace > 0 {
			time.Sleep(pace) // the stream's pace, not a wait for a condition
		}
	}
	for p := int32(0); p < 3; p++ {
		v := fmt.Sprintf(`{"symbol":"ZZ-P%d","ts":%d,"price":"1.5","qty":"2","trade_id":"close-%d","side":"sell"}`, p, sxCloserTS(cfg), p)
		r := &kgo.Record{Topic: "trades", Key: []byte(fmt.Sprintf("ZZ-P%d", p)), Value: []byte(v), Partition: p}
		if err := cl.ProduceSync(h.ctx, r).FirstErr(); err != nil {
			t.Errorf("produce closer: %v", err)
		}
	}
}

// sxHourEnd is H: the first whole hour after the stream.
func sxHourEnd(cfg gen.Config) int64 {
	return cfg.Start.Add(cfg.Span).Truncate(time.Hour).Add(time.Hour).UnixMilli()
}

func sxCloserTS(cfg gen.Config) int64 { return sxHourEnd(cfg) + 2000 } // + lateness

// waitClosed waits until every real symbol's hour ending at H is on the 1h topic.
func (h *sxHarness) waitClosed(cfg gen.Config, within time.Duration) {
	t := h.t
	deadline := time.Now().Add(within)
	for {
		closed := map[string]bool{}
		for _, r := range testkit.ReadTopic(t, []string{h.broker}, "sx.1h") {
			if c, err := candle.ParseJSON(r.Value); err == nil && c.CloseTime == sxHourEnd(cfg) {
				closed[c.Symbol] = true
			}
		}
		if len(closed) == len(cfg.Symbols) {
			return
		}
		h.running()
		if time.Now().After(deadline) {
			t.Fatalf("after %v only %d of %d symbols closed their last hour on sx.1h", within, len(closed), len(cfg.Symbols))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sxMaxIdle is the topology's max_idle.
const sxMaxIdle = 10 * time.Minute

// sxWantCounts is how many candles of each timeframe the topics settle to:
// per symbol (closers included), every window from its first trade's to
// the last opening less than max_idle after its last trade.
func sxWantCounts(t *testing.T, cfg gen.Config) map[string]int {
	t.Helper()
	first, last := map[string]int64{}, map[string]int64{}
	for _, tr := range wantLedger(t, cfg) {
		var ts int64
		fmt.Sscan(tr.TS, &ts)
		if f, ok := first[tr.Symbol]; !ok || ts < f {
			first[tr.Symbol] = ts
		}
		last[tr.Symbol] = max(last[tr.Symbol], ts)
	}
	out := map[string]int{}
	for sym, f := range first {
		end := last[sym] + sxMaxIdle.Milliseconds() // windows open before it
		for tf, ms := range map[string]int64{"1m": 60_000, "5m": 300_000, "1h": 3_600_000} {
			out[tf] += int((end-1)/ms - f/ms + 1)
		}
	}
	return out
}

// waitSettled waits until the topics hold every candle they settle to
// (sxWantCounts), then returns them.
func (h *sxHarness) waitSettled(cfg gen.Config, within time.Duration) map[string]candle.Candle {
	t := h.t
	want := sxWantCounts(t, cfg)
	deadline := time.Now().Add(within)
	for {
		cs := h.topicCandles()
		got := map[string]int{}
		for _, c := range cs {
			got[c.Timeframe]++
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return cs
		}
		h.running()
		if time.Now().After(deadline) {
			t.Fatalf("after %v the topics hold %v candles, want %v", within, got, want)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// topicCandles reads the candle topics: the truth. No candle may appear twice.
func (h *sxHarness) topicCandles() map[string]candle.Candle {
	t := h.t
	out := map[string]candle.Candle{}
	for _, topic := range sxTopics {
		for _, r := range testkit.ReadTopic(t, []string{h.broker}, topic) {
			if engine.IsQuietRecord(r) {
				continue // a rollup's control record (max_idle), not a candle
			}
			c, err := candle.ParseJSON(r.Value)
			if err != nil {
				t.Fatalf("%s offset %d: %v", topic, r.Offset, err)
			}
			k := sxKey(c)
			if _, dup := out[k]; dup {
				t.Fatalf("%s holds %s twice", topic, k)
			}
			out[k] = c
		}
	}
	return out
}

func sxKey(c candle.Candle) string {
	return fmt.Sprintf("%s|%s|%d", c.Timeframe, c.Symbol, c.OpenTime)
}

func sxJSON(c candle.Candle) string { return string(c.AppendJSON(nil)) }

// diffCandles lists what got lacks, has extra or has different from want.
func diffCandles(where string, want, got map[string]candle.Candle) []string {
	var out []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s lacks %s", where, k))
		case sxJSON(g) != sxJSON(w):
			out = append(out, fmt.Sprintf("%s %s:\n  got  %s\n  want %s", where, k, sxJSON(g), sxJSON(w)))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%s has %s, which is on no topic", where, k))
		}
	}
	sort.Strings(out)
	return out
}

// dynamoCandles reads every series back with the sink's own Range query.
func (h *sxHarness) dynamoCandles(want map[string]candle.Candle) (map[string]candle.Candle, error) {
	tp, err := loadTopology(h.top)
	if err != nil {
		return nil, err
	}
	s, err := dynamodb.New(h.ctx, *tp.Sinks["history"].Config.(*dynamodb.Config))
	if err != nil {
		return nil, err
	}
	series := map[[2]string]bool{}
	for _, c := range want {
		series[[2]string{c.Symbol, c.Timeframe}] = true
	}
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	got := map[string]candle.Candle{}
	for s2 := range series {
		cs, err := s.Reader().Range(ctx, s2[0], s2[1], 0, math.MaxInt64)
		if err != nil {
			return nil, err
		}
		for _, c := range cs {
			got[sxKey(c)] = c
		}
	}
	return got, nil
}

// lakeCandles reads every Parquet object of the lake; a candle stored twice
// (in two objects, or twice in one) is an error.
func (h *sxHarness) lakeCandles() (map[string]candle.Candle, map[string][]byte, []string) {
	objs, err := h.s3.objects("bucket")
	if err != nil {
		return nil, nil, []string{err.Error()}
	}
	got := map[string]candle.Candle{}
	var probs []string
	for key, data := range objs {
		cs, err := s3parquet.Decode(data)
		if err != nil {
			probs = append(probs, fmt.Sprintf("s3 %s: %v", key, err))
			continue
		}
		for _, c := range cs {
			if want := "lake/" + s3parquet.PartitionPath(c.Timeframe, c.Symbol, c.OpenTime); key != want {
				probs = append(probs, fmt.Sprintf("s3: %s is in %s, want %s", sxKey(c), key, want))
			}
			if _, dup := got[sxKey(c)]; dup {
				probs = append(probs, fmt.Sprintf("s3: %s stored twice", sxKey(c)))
			}
			got[sxKey(c)] = c
		}
	}
	return got, objs, probs
}

// liveProblems checks that every candle:active hash holds the newest final
// candle of its key, field by field.
func (h *sxHarness) liveProblems(want map[string]candle.Candle) []string {
	newest := map[string]candle.Candle{}
	for _, c := range want {
		k := "candle:active:" + c.Timeframe + ":" + c.Symbol
		if n, ok := newest[k]; !ok || c.OpenTime > n.OpenTime {
			newest[k] = c
		}
	}
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	var probs []string
	for k, c := range newest {
		m, err := h.vk.Do(ctx, h.vk.B().Hgetall().Key(k).Build()).AsStrMap()
		if err != nil {
			return []string{fmt.Sprintf("valkey HGETALL %s: %v", k, err)}
		}
		exp := map[string]string{"o": c.Open.String(), "h": c.High.String(), "l": c.Low.String(), "c": c.Close.String(),
			"v": c.Volume.String(), "q": c.QuoteVolume.String(), "t": fmt.Sprint(c.Trades),
			"open_time": fmt.Sprint(c.OpenTime), "close_time": fmt.Sprint(c.CloseTime),
			"tb": "", "tq": "", "fid": c.FirstTradeID, "lid": c.LastTradeID, "rev": fmt.Sprint(c.Rev)} // "": none
		if c.Taker {
			exp["tb"], exp["tq"] = c.TakerBuyVolume.String(), c.TakerBuyQuoteVolume.String()
		}
		if fmt.Sprint(m) != fmt.Sprint(exp) {
			probs = append(probs, fmt.Sprintf("valkey %s:\n  got  %v\n  want %v", k, m, exp))
		}
	}
	sort.Strings(probs)
	return probs
}

// sxTrade is a ledger row in canonical text.
type sxTrade struct{ Symbol, TS, ID, Price, Qty string }

// wantLedger regenerates the stream and keeps each valid trade once
// (duplicates repeat a trade verbatim; malformed records are not trades).
func wantLedger(t *testing.T, cfg gen.Config) map[string]sxTrade {
	g, err := gen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]sxTrade{}
	add := func(v []byte) {
		d := json.NewDecoder(bytes.NewReader(v))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			t.Fatalf("generated trade %s: %v", v, err)
		}
		tr := sxTrade{Symbol: fmt.Sprint(m["symbol"]), TS: fmt.Sprint(m["ts"]), ID: fmt.Sprint(m["trade_id"]),
			Price: decimal.MustParse(fmt.Sprint(m["price"])).String(), Qty: decimal.MustParse(fmt.Sprint(m["qty"])).String()}
		out[tr.Symbol+"|"+tr.TS+"#"+tr.ID] = tr
	}
	for {
		_, v, ok := g.Next()
		if !ok {
			break
		}
		if g.Kind() == gen.Trade {
			add(v)
		}
	}
	for p := 0; p < 3; p++ {
		add([]byte(fmt.Sprintf(`{"symbol":"ZZ-P%d","ts":%d,"price":"1.5","qty":"2","trade_id":"close-%d","side":"sell"}`, p, sxCloserTS(cfg), p)))
	}
	return out
}

// ledgerProblems scans the ledger table: each wanted trade once, under its
// hour partition, with an expiry 24 h after its event time.
func (h *sxHarness) ledgerProblems(want map[string]sxTrade) []string {
	cl := ddbsdk.New(ddbsdk.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + h.ddbAddr),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})
	ctx, cancel := context.WithTimeout(h.ctx, 20*time.Second)
	defer cancel()
	got := map[string]sxTrade{}
	var probs []string
	p := ddbsdk.NewScanPaginator(cl, &ddbsdk.ScanInput{TableName: aws.String("trades")})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return []string{fmt.Sprintf("scan trades: %v", err)}
		}
		for _, it := range page.Items {
			s := func(k string) string {
				switch v := it[k].(type) {
				case *types.AttributeValueMemberS:
					return v.Value
				case *types.AttributeValueMemberN:
					return v.Value
				}
				return ""
			}
			tr := sxTrade{Symbol: s("symbol"), TS: s("ts"), ID: s("trade_id"), Price: s("price"), Qty: s("qty")}
			var ms int64
			fmt.Sscan(tr.TS, &ms)
			if pk, want := s("pk"), tr.Symbol+"#"+time.UnixMilli(ms).UTC().Format("2006-01-02-15"); pk != want {
				probs = append(probs, fmt.Sprintf("ledger pk %q, want %q", pk, want))
			}
			if sk := s("sk"); sk != tr.TS+"#"+tr.ID {
				probs = append(probs, fmt.Sprintf("ledger sk %q, want %s#%s", sk, tr.TS, tr.ID))
			}
			// Expiry: event time + 24 h, rounded up to whole seconds.
			if exp, want := s("expires_at"), fmt.Sprint((ms+24*3600*1000+999)/1000); exp != want {
				probs = append(probs, fmt.Sprintf("ledger %s expires_at %s, want %s", tr.TS, exp, want))
			}
			k := tr.Symbol + "|" + tr.TS + "#" + tr.ID
			if _, dup := got[k]; dup {
				probs = append(probs, "ledger holds "+k+" twice")
			}
			got[k] = tr
		}
	}
	for k, w := range want {
		if g, ok := got[k]; !ok {
			probs = append(probs, "ledger lacks "+k)
		} else if g != w {
			probs = append(probs, fmt.Sprintf("ledger %s = %+v, want %+v", k, g, w))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			probs = append(probs, "ledger has "+k+", which is no valid trade")
		}
	}
	sort.Strings(probs)
	return probs
}

// sinkProblems compares every sink with the topics.
func (h *sxHarness) sinkProblems(want map[string]candle.Candle, ledger map[string]sxTrade) []string {
	var probs []string
	if got, err := h.dynamoCandles(want); err != nil {
		probs = append(probs, "dynamodb: "+err.Error())
	} else {
		probs = append(probs, diffCandles("dynamodb", want, got)...)
	}
	got, _, p := h.lakeCandles()
	probs = append(append(probs, p...), diffCandles("s3", want, got)...)
	probs = append(probs, h.liveProblems(want)...)
	return append(probs, h.ledgerProblems(ledger)...)
}

// waitSinks polls until every sink equals the topics, or fails with the differences.
func (h *sxHarness) waitSinks(want map[string]candle.Candle, ledger map[string]sxTrade, within time.Duration) {
	deadline := time.Now().Add(within)
	for {
		probs := h.sinkProblems(want, ledger)
		if len(probs) == 0 {
			return
		}
		h.running()
		if time.Now().After(deadline) {
			if len(probs) > 30 {
				probs = append(probs[:30], fmt.Sprintf("… and %d more", len(probs)-30))
			}
			h.t.Fatalf("sinks differ from the candle topics after %v:\n%s", within, strings.Join(probs, "\n"))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// Every candle on the output topics reaches every sink exactly, the ledger
// holds each valid trade once, and live subscribers see every final 1m candle.
func TestSinksThroughTopology(t *testing.T) {
	testkit.WallClockTest(t)
	start := time.Now()
	h := newSXHarness(t)
	defer h.shutdown()

	// Subscribe before anything is published.
	var mu sync.Mutex
	published := map[string]int{}
	var bad []string
	sub, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{h.redisAddr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		_ = sub.Receive(h.ctx, sub.B().Psubscribe().Pattern("pub:candle:1m:*").Build(), func(m valkey.PubSubMessage) {
			mu.Lock()
			defer mu.Unlock()
			body, final := strings.CutSuffix(m.Message, `,"final":true}`)
			if !final {
				return
			}
			c, err := candle.ParseJSON([]byte(body + "}"))
			if err != nil || m.Channel != "pub:candle:1m:"+c.Symbol {
				bad = append(bad, m.Channel+" "+m.Message)
				return
			}
			published[sxJSON(c)]++
		})
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		n, err := h.vk.Do(h.ctx, h.vk.B().PubsubNumpat().Build()).AsInt64()
		if err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the PSUBSCRIBE never registered (numpat %d, %v)", n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	cfg := sxStream(3000, 100*time.Minute)
	h.startRun()
	h.produce(cfg, 0)
	h.waitClosed(cfg, 40*time.Second)
	want := h.waitSettled(cfg, 40*time.Second)
	taker := 0
	for _, c := range want {
		if c.Taker && c.TakerBuyVolume.Sign() > 0 {
			taker++
		}
	}
	if taker < len(want)/2 { // the sinks below must hold them too
		t.Fatalf("%d of %d candles have taker buy volume: the source maps side and gen writes it", taker, len(want))
	}
	ledger := wantLedger(t, cfg)
	h.waitSinks(want, ledger, 30*time.Second)

	// Per symbol, from its first trade to max_idle after its last, gaps
	// included: 4 × 110 1m, 22 5m, 2 1h, and each closer 11, 3, 1.
	count := map[string]int{}
	for _, c := range want {
		count[c.Timeframe]++
	}
	if count["1m"] != 4*110+3*11 || count["5m"] != 4*22+3*3 || count["1h"] != 4*2+3*1 {
		t.Errorf("candles on the topics: %v, want 1m:473 5m:97 1h:11", count)
	}

	// Every final 1m candle was published (a redelivery may publish one again).
	for deadline := time.Now().Add(10 * time.Second); ; {
		mu.Lock()
		var missing []string
		for k, c := range want {
			if c.Timeframe == "1m" && published[sxJSON(c)] == 0 {
				missing = append(missing, k)
			}
		}
		n, b := len(published), append([]string(nil), bad...)
		mu.Unlock()
		if len(b) > 0 {
			t.Fatalf("unreadable or misrouted messages: %q", b)
		}
		if len(missing) == 0 {
			if n != count["1m"] {
				t.Errorf("%d distinct final 1m candles published, want %d", n, count["1m"])
			}
			break
		}
		if time.Now().After(deadline) {
			sort.Strings(missing)
			t.Fatalf("%d final 1m candles never published, e.g. %v", len(missing), missing[:min(5, len(missing))])
		}
		time.Sleep(100 * time.Millisecond)
	}

	// One lake object, read by an independent Parquet reader (DuckDB).
	lake, objs, _ := h.lakeCandles()
	key := "lake/" + s3parquet.PartitionPath("1m", "BTC-USD", cfg.Start.UnixMilli())
	data, ok := objs[key]
	if !ok {
		t.Fatalf("no object %s in the lake", key)
	}
	file := filepath.Join(t.TempDir(), "day.parquet")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var fromDuck []string
	for _, line := range testkit.DuckDB(t, file, `SELECT symbol, timeframe, epoch_ms(open_time)::VARCHAR AS ot, epoch_ms(close_time)::VARCHAR AS ct,
		open::VARCHAR AS o, high::VARCHAR AS h, low::VARCHAR AS l, close::VARCHAR AS c, volume::VARCHAR AS v,
		quote_volume::VARCHAR AS q, trades::VARCHAR AS n, gap, taker_buy_base_volume AS tb, taker_buy_quote_volume AS tq,
		first_trade_id AS fid, last_trade_id AS lid FROM t ORDER BY open_time`) {
		var r struct {
			Symbol, Timeframe, OT, CT, O, H, L, C, V, Q, N string
			TB, TQ, FID, LID                               string
			Gap                                            bool
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("duckdb row %s: %v", line, err)
		}
		c := candle.Candle{Symbol: r.Symbol, Timeframe: r.Timeframe, Gap: r.Gap,
			Open: decimal.MustParse(r.O), High: decimal.MustParse(r.H), Low: decimal.MustParse(r.L), Close: decimal.MustParse(r.C),
			Volume: decimal.MustParseSum(r.V), QuoteVolume: decimal.MustParseSum(r.Q), FirstTradeID: r.FID, LastTradeID: r.LID}
		if r.TB != "" { // "": no taker volumes
			c.Taker, c.TakerBuyVolume, c.TakerBuyQuoteVolume = true, decimal.MustParseSum(r.TB), decimal.MustParseSum(r.TQ)
		}
		fmt.Sscan(r.OT, &c.OpenTime)
		fmt.Sscan(r.CT, &c.CloseTime)
		fmt.Sscan(r.N, &c.Trades)
		fromDuck = append(fromDuck, sxJSON(c))
	}
	var fromTopic []string
	for _, c := range want {
		if c.Timeframe == "1m" && c.Symbol == "BTC-USD" {
			fromTopic = append(fromTopic, sxJSON(c))
		}
	}
	sort.Strings(fromTopic)
	sort.Strings(fromDuck)
	if len(fromTopic) != 110 || strings.Join(fromDuck, "\n") != strings.Join(fromTopic, "\n") {
		t.Errorf("DuckDB read %d rows of %s, the topic has %d 1m BTC-USD candles; first difference:\n%s",
			len(fromDuck), key, len(fromTopic), firstDiff(fromDuck, fromTopic))
	}
	if len(lake) != len(want) {
		t.Errorf("lake holds %d candles, topics %d", len(lake), len(want))
	}
	// Every object again through parquet-go's untyped reader, by column
	// name, independent of the connector's row struct.
	untyped := map[string]candle.Candle{}
	for key, data := range objs {
		cs, err := sxReadParquet(data)
		if err != nil {
			t.Fatalf("parquet-go reading %s: %v", key, err)
		}
		for _, c := range cs {
			if _, dup := untyped[sxKey(c)]; dup {
				t.Errorf("%s stored twice in the lake", sxKey(c))
			}
			untyped[sxKey(c)] = c
		}
	}
	for _, p := range diffCandles("lake read by parquet-go", want, untyped) {
		t.Error(p)
	}
	// kandle query reads the ledger back across its hour partitions.
	lo, hi := cfg.Start.Add(10*time.Minute).UnixMilli(), cfg.Start.Add(70*time.Minute).UnixMilli()
	var rows []sxTrade
	for _, tr := range ledger {
		var ms int64
		fmt.Sscan(tr.TS, &ms)
		if tr.Symbol == "BTC-USD" && ms >= lo && ms < hi {
			rows = append(rows, tr)
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].TS+"#"+rows[i].ID < rows[j].TS+"#"+rows[j].ID })
	var wantOut strings.Builder
	for _, tr := range rows {
		fmt.Fprintf(&wantOut, `{"key":%q,"ts":%s,"price":%q,"qty":%q,"trade_id":%q}`+"\n", tr.Symbol, tr.TS, tr.Price, tr.Qty, tr.ID)
	}
	out, errOut, code := runKandle(t, "query", "-t", h.top, "-sink", "ledger", "-json", "trades", "BTC-USD",
		"-from", fmt.Sprint(lo), "-to", time.UnixMilli(hi).UTC().Format(time.RFC3339))
	if code != 0 || out != wantOut.String() || len(rows) < 100 {
		t.Errorf("kandle query trades (exit %d, %d rows wanted): %s\ngot:\n%s\nwant:\n%s", code, len(rows), errOut,
			sxTail(out, 1500), sxTail(wantOut.String(), 1500))
	}
	t.Logf("%d candles, %d ledger trades in every sink after %v", len(want), len(ledger), time.Since(start).Round(time.Millisecond))
}

// sxReadParquet reads a lake object with parquet-go's untyped row reader,
// looking columns up by name; decimals are DECIMAL(38,18) as 16 big-endian bytes.
func sxReadParquet(data []byte) ([]candle.Candle, error) {
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, err
	}
	col := map[string]int{}
	for _, name := range []string{"symbol", "timeframe", "open_time", "close_time", "open", "high", "low", "close",
		"volume", "quote_volume", "trades", "gap", "taker_buy_base_volume", "taker_buy_quote_volume", "first_trade_id", "last_trade_id"} {
		leaf, ok := f.Schema().Lookup(name)
		if !ok {
			return nil, fmt.Errorf("no column %q", name)
		}
		col[name] = leaf.ColumnIndex
	}
	r := parquet.NewReader(f)
	defer r.Close()
	var out []candle.Candle
	rows := make([]parquet.Row, 128)
	for {
		n, err := r.ReadRows(rows)
		for _, row := range rows[:n] {
			val := map[int]parquet.Value{}
			for _, v := range row {
				val[v.Column()] = v
			}
			dec := func(name string) decimal.Decimal {
				b := val[col[name]].ByteArray()
				if len(b) != 16 {
					return decimal.Decimal{}
				}
				return decimal.FromRaw(binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:]))
			}
			sum := func(name string) decimal.Sum { // volumes are exact decimal text
				s, _ := decimal.ParseSum(val[col[name]].ByteArray())
				return s
			}
			c := candle.Candle{Symbol: string(val[col["symbol"]].ByteArray()),
				Timeframe: string(val[col["timeframe"]].ByteArray()),
				OpenTime:  val[col["open_time"]].Int64(), CloseTime: val[col["close_time"]].Int64(),
				Open: dec("open"), High: dec("high"), Low: dec("low"), Close: dec("close"),
				Volume: sum("volume"), QuoteVolume: sum("quote_volume"),
				Trades: val[col["trades"]].Int64(), Gap: val[col["gap"]].Boolean(),
				FirstTradeID: string(val[col["first_trade_id"]].ByteArray()), LastTradeID: string(val[col["last_trade_id"]].ByteArray())}
			if len(val[col["taker_buy_base_volume"]].ByteArray()) > 0 { // "": no taker volumes
				c.Taker, c.TakerBuyVolume, c.TakerBuyQuoteVolume = true, sum("taker_buy_base_volume"), sum("taker_buy_quote_volume")
			}
			out = append(out, c)
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func firstDiff(a, b []string) string {
	for i := 0; i < min(len(a), len(b)); i++ {
		if a[i] != b[i] {
			return "  got  " + a[i] + "\n  want " + b[i]
		}
	}
	return fmt.Sprintf("  lengths %d and %d", len(a), len(b))
}

// Each sink server goes down in turn while trades keep flowing: candle
// production does not wait for sinks, and after the restarts every sink
// holds exactly the topics' candles and the ledger every trade once.
// The restarted servers keep their data (dynalite's LevelDB folder, Redis's
// append-only file, the same in-memory S3 backend behind a new listener),
// so "nothing lost" is checked exactly: whatever a sink stage had not
// flushed and committed before the outage must be redelivered and written.
func TestSinksSurviveOutages(t *testing.T) {
	testkit.WallClockTest(t)
	start := time.Now()
	h := newSXHarness(t)
	defer h.shutdown()
	h.process = true
	cfg := sxStream(4000, 200*time.Minute)
	h.startRun()
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		h.produce(cfg, 2*time.Millisecond)
	}()

	adm := kadm.NewClient(h.kgo())
	end := func() int64 {
		o, err := adm.ListEndOffsets(h.ctx, "sx.1m")
		if err != nil {
			return -1
		}
		var n int64
		o.Each(func(l kadm.ListedOffset) { n += l.Offset })
		return n
	}
	waitGrowth := func(from int64, what string) int64 {
		for deadline := time.Now().Add(20 * time.Second); ; {
			if n := end(); n > from {
				return n
			}
			if time.Now().After(deadline) {
				t.Fatalf("sx.1m stopped growing while %s (end offsets %d)", what, from)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitGrowth(0, "starting")
	outages := []struct {
		name          string
		sinks         []string
		stop, restart func()
		crashRun      bool
	}{
		{"valkey", []string{"live"}, func() { h.redis.Stop() }, h.startRedis, false},
		{"s3", []string{"lake"}, h.s3.stop, h.s3.restart, false},
		// kandle run is also killed (SIGKILL) while DynamoDB is down: what
		// its sink stages had taken but could not flush was never committed,
		// so the new process must get it redelivered and write it.
		{"dynamodb", []string{"history", "ledger"}, func() { h.ddb.Stop() }, h.startDynalite, true},
	}
	for _, o := range outages {
		before := end()
		mark := len(h.log.String())
		o.stop()
		down := time.Now()
		n := waitGrowth(before, o.name+" is down")
		n = waitGrowth(n, o.name+" is down") // several commits, not one that was in flight
		time.Sleep(max(0, 1500*time.Millisecond-time.Since(down)))
		during := h.log.String()[mark:]
		if o.crashRun {
			h.crashRun()
			n = waitGrowth(end(), "kandle run restarted with "+o.name+" down")
		}
		o.restart()
		t.Logf("%s down %v; sx.1m end offsets %d → %d meanwhile", o.name, time.Since(down).Round(time.Millisecond), before, n)
		// The outage was felt: the sink's writes failed and were retried.
		for _, sink := range o.sinks {
			if !sxWarned(during, sink) {
				t.Errorf("no failed write of sink %s was logged while %s was down", sink, o.name)
			}
		}
	}
	select {
	case <-produced:
	case <-time.After(40 * time.Second):
		t.Fatal("producing the stream took over 40 s")
	}
	t.Logf("stream produced at %v", time.Since(start).Round(time.Millisecond))
	h.waitClosed(cfg, 40*time.Second)
	t.Logf("last hour closed at %v", time.Since(start).Round(time.Millisecond))
	want := h.waitSettled(cfg, 40*time.Second)
	h.waitSinks(want, wantLedger(t, cfg), 40*time.Second)
	if n := len(want); n != 4*(210+42+4)+3*(11+3+1) {
		t.Errorf("%d candles on the topics, want 4 symbols × (210 1m + 42 5m + 4 1h) + 3 closers × (11 + 3 + 1) = 1069", n)
	}
	t.Logf("%d candles exact in every sink after three outages, %v", len(want), time.Since(start).Round(time.Millisecond))
}

func sxWarned(log, sink string) bool {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "sink="+sink+" ") {
			return true
		}
	}
	return false
}

func (h *sxHarness) kgo() *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.broker))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(cl.Close)
	return cl
}

// sxS3 is an in-process S3 (gofakes3) that can go away and come back on
// the same port with its data.
type sxS3 struct {
	t       *testing.T
	handler http.Handler
	addr    string
	mu      sync.Mutex
	srv     *httptest.Server
}

func newSXS3(t *testing.T, buckets ...string) *sxS3 {
	f := &sxS3{t: t, handler: gofakes3.New(s3mem.New()).Server()}
	f.srv = httptest.NewServer(f.handler)
	f.addr = f.srv.Listener.Addr().String()
	t.Cleanup(f.stop)
	for _, b := range buckets {
		if _, err := f.client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(b)}); err != nil {
			t.Fatalf("create bucket %s: %v", b, err)
		}
	}
	return f
}

func (f *sxS3) url() string { return "http://" + f.addr }

func (f *sxS3) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.srv != nil {
		f.srv.CloseClientConnections()
		f.srv.Close()
		f.srv = nil
	}
}

func (f *sxS3) restart() {
	var l net.Listener
	var err error
	for i := 0; i < 100; i++ { // the port may linger briefly after Close
		if l, err = net.Listen("tcp", f.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		f.t.Fatalf("relisten on %s: %v", f.addr, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.srv = &httptest.Server{Listener: l, Config: &http.Server{Handler: f.handler}}
	f.srv.Start()
}

func (f *sxS3) client() *s3.Client {
	return s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(f.url()), UsePathStyle: true,
		Credentials:                credentials.NewStaticCredentialsProvider("test", "test", ""),
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired})
}

// objects returns every object of bucket with its bytes.
func (f *sxS3) objects(bucket string) (map[string][]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := f.client()
	out := map[string][]byte{}
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", bucket, err)
		}
		for _, o := range page.Contents {
			if strings.HasSuffix(*o.Key, s3parquet.ProbeKey) {
				continue // the lake sink's start-up probe of conditional writes
			}
			g, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: o.Key})
			if err != nil {
				return nil, fmt.Errorf("get %s: %w", *o.Key, err)
			}
			b, err := io.ReadAll(g.Body)
			g.Body.Close()
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", *o.Key, err)
			}
			out[*o.Key] = b
		}
	}
	return out, nil
}

// sxBuffer is a bytes.Buffer safe for the goroutines that log into it.
type sxBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *sxBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *sxBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func sxTail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
