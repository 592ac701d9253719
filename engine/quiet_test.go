package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/kafka"
	kkin "github.com/kandle/kandle/connectors/kinesis"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/state"
	"github.com/kandle/kandle/topology"
)

// Lateness, idle_timeout and max_future are as shipped. c.1m and c.5m have
// the trades' partition count, so c5m and c15m run fused into c1m's stage
// unless the test unfuses them (setFuse).
const quietTopology = `
name: quiet
brokers: [%s]
metrics: ""
commit_interval: 50ms
sources:
  trades: {topic: trades, partitions: 1}
processors:
  c1m: {kind: candles, from: trades, timeframe: 1m, max_idle: 3m, output: {topic: c.1m, partitions: 1}}
  c5m: {kind: rollup, from: c1m, timeframe: 5m, output: {topic: c.5m, partitions: 1}}
  c15m: {kind: rollup, from: c5m, timeframe: 15m, output: {topic: c.15m, partitions: 1}}
  d5m: {kind: candles, from: trades, timeframe: 5m, max_idle: 3m, output: {topic: d.5m, partitions: 2}}
  d15m: {kind: candles, from: trades, timeframe: 15m, max_idle: 3m, output: {topic: d.15m, partitions: 1}}
sinks:
  mem: {kind: memory, from: [c1m, c5m]}
dead_letter: {topic: quiet.dlq}
`

// memSink keeps the candles written to it, by timeframe and symbol.
type memSink struct {
	mu sync.Mutex
	cs map[string]map[string][]string
}

func (m *memSink) Write(_ context.Context, cs []candle.Candle) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range cs {
		c := &cs[i]
		if m.cs[c.Timeframe] == nil {
			m.cs[c.Timeframe] = map[string][]string{}
		}
		m.cs[c.Timeframe][c.Symbol] = append(m.cs[c.Timeframe][c.Symbol], string(c.AppendJSON(nil)))
	}
	return nil
}
func (m *memSink) Flush(context.Context) error { return nil }
func (m *memSink) Close(context.Context) error { return nil }

func (m *memSink) byTimeframe(tf string) map[string][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]string{}
	for sym, v := range m.cs[tf] {
		out[sym] = slices.Sorted(slices.Values(v))
	}
	return out
}

// quietTrades: A goes quiet at 09:33:10 (its 1m run ends inside the 5m
// window 09:35 and the 15m window 09:30, which only quiet marks close), B at
// 09:07:30 and comes back at 10:02 for a new run, C trades until 11:00 and
// moves the watermark, Z at 13:00 lets a replay close everything before it.
func quietTrades() (keys []string, values [][]byte) {
	id := 0
	add := func(sym string, ts time.Time, price string) {
		id++
		keys = append(keys, sym)
		values = append(values, fmt.Appendf(nil, `{"symbol":%q,"ts":%d,"price":%q,"qty":"0.5","trade_id":%d}`, sym, ts.UnixMilli(), price, id))
	}
	prices := []string{"100", "101.5", "99.25", "100.75"}
	for ts, i := t0, 0; !ts.After(t0.Add(2 * time.Hour)); ts, i = ts.Add(10*time.Second), i+1 {
		p := prices[i%len(prices)]
		if !ts.After(t0.Add(33*time.Minute + 10*time.Second)) {
			add("A", ts, p)
		}
		if !ts.After(t0.Add(7*time.Minute+30*time.Second)) || (!ts.Before(t0.Add(62*time.Minute)) && !ts.After(t0.Add(80*time.Minute))) {
			add("B", ts.Add(time.Second), p)
		}
		add("C", ts.Add(2*time.Second), p)
	}
	add("Z", t0.Add(4*time.Hour), "1")
	return keys, values
}

// bySymbol reads topic's committed candles grouped by symbol (sorted JSON),
// and counts its quiet records.
func bySymbol(t *testing.T, seeds []string, topic string) (map[string][]string, int) {
	out := map[string][]string{}
	quiet := 0
	for _, r := range testkit.ReadTopic(t, seeds, topic) {
		if engine.IsQuietRecord(r) {
			if _, err := candle.ParseJSON(r.Value); err == nil {
				t.Fatalf("%s: a quiet record parses as a candle: %s", topic, r.Value)
			}
			if _, err := engine.DecodeQuiet(r.Value); err != nil {
				t.Fatalf("%s: %v", topic, err)
			}
			quiet++
			continue
		}
		c, err := candle.ParseJSON(r.Value)
		if err != nil {
			t.Fatalf("%s: unreadable record %q: %v", topic, r.Value, err)
		}
		out[c.Symbol] = append(out[c.Symbol], string(r.Value))
	}
	for _, v := range out {
		sort.Strings(v)
	}
	return out, quiet
}

func sameSymbols(a, b map[string][]string, skip string) string {
	var diff strings.Builder
	syms := map[string]bool{}
	for s := range a {
		syms[s] = true
	}
	for s := range b {
		syms[s] = true
	}
	for s := range syms {
		if s != skip && strings.Join(a[s], "\n") != strings.Join(b[s], "\n") {
			fmt.Fprintf(&diff, "symbol %s:\n  %s\nvs\n  %s\n", s, strings.Join(a[s], "\n  "), strings.Join(b[s], "\n  "))
		}
	}
	return diff.String()
}

// Keys that go quiet (max_idle) close every rollup window they have open
// exactly as direct aggregation closes it, in the running engine: the live
// 1m→5m→15m rollups equal direct 5m and 15m processors on the same trades,
// and equal a replay; the rollup stages free the quiet keys' state
// (tombstones in the changelog, nothing left in Pebble); a sink reading the
// topics that carry quiet records gets every candle and no error. Both with
// c5m and c15m fused into c1m's stage (quiet marks handed to Rollup.Quiet
// from memory) and as stages of their own (quiet records read from the
// topics).
func TestLiveRollupOfQuietKeys(t *testing.T) {
	testkit.WallClockTest(t)
	eachFuseMode(t, testLiveRollupOfQuietKeys)
}

func testLiveRollupOfQuietKeys(t *testing.T, mode string) {
	seeds := devBroker(t)
	top, err := topology.Parse("quiet.yaml", fmt.Appendf(nil, quietTopology, seeds[0]), topology.Registry{Sinks: map[string]topology.SinkKind{
		"memory": {Name: "memory", Doc: "test sink", New: func() any { return &struct{}{} }}}})
	if err != nil {
		t.Fatal(err)
	}
	setFuse(top, mode)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kafka.EnsureTopics(context.Background(), cl, []kafka.TopicSpec{{Name: "trades", Partitions: 1}}); err != nil {
		t.Fatal(err)
	}
	keys, values := quietTrades()
	for i := range keys {
		cl.Produce(context.Background(), &kgo.Record{Topic: "trades", Key: []byte(keys[i]), Value: values[i]}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}
	if err := cl.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}

	var rec recordingOutput
	if _, err := engine.Replay(context.Background(), top, seeds, engine.ReplayOptions{
		Started: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Out: &rec}); err != nil {
		t.Fatal(err)
	}
	replay := map[string]map[string][]string{}
	for topic, cs := range rec.byTopic {
		replay[topic] = map[string][]string{}
		for _, v := range cs {
			c, err := candle.ParseJSON([]byte(v))
			if err != nil {
				t.Fatal(err)
			}
			replay[topic][c.Symbol] = append(replay[topic][c.Symbol], v)
		}
		for _, v := range replay[topic] {
			sort.Strings(v)
		}
	}
	// The replay itself: rollups equal direct aggregation for every key the
	// input closed (Z's last windows stay open: a replay never closes by the
	// wall clock).
	for _, p := range [][2]string{{"c.5m", "d.5m"}, {"c.15m", "d.15m"}} {
		if d := sameSymbols(replay[p[0]], replay[p[1]], "Z"); d != "" {
			t.Fatalf("replay: rollup %s differs from direct %s:\n%s", p[0], p[1], d)
		}
	}
	// The quiet keys' last windows are there (A's 5m 09:35 holds only gap sub-candles).
	last5 := fmt.Sprintf(`"open_time":%d`, t0.Add(35*time.Minute).UnixMilli())
	if !strings.Contains(strings.Join(replay["c.5m"]["A"], ""), last5) {
		t.Fatalf("replay: A's last 5m window (09:35) is missing: %v", replay["c.5m"]["A"])
	}

	dir := t.TempDir()
	sink := &memSink{cs: map[string]map[string][]string{}}
	reg := prometheus.NewRegistry()
	eng, err := engine.New(top, engine.WithStateDir(dir), engine.WithInstanceID("a"),
		engine.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))),
		engine.WithSessionTimeout(6*time.Second), engine.WithTransactionTimeout(6*time.Second),
		engine.WithSink("mem", sink), engine.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- eng.Run(ctx) }()
	stopped := false
	defer func() {
		if !stopped {
			r.stop(t)
		}
	}()
	topics := []string{"c.1m", "c.5m", "c.15m", "d.5m", "d.15m"}
	deadline := time.Now().Add(90 * time.Second)
	var live map[string]map[string][]string
	var quiet map[string]int
	for {
		live, quiet = map[string]map[string][]string{}, map[string]int{}
		for _, topic := range topics {
			live[topic], quiet[topic] = bySymbol(t, seeds, topic)
		}
		var diff strings.Builder
		// Live: rollups equal direct for every key, Z too (the wall clock
		// closes its run; its quiet marks close the rollups).
		for _, p := range [][2]string{{"c.5m", "d.5m"}, {"c.15m", "d.15m"}} {
			if d := sameSymbols(live[p[0]], live[p[1]], ""); d != "" {
				fmt.Fprintf(&diff, "live: rollup %s differs from direct %s:\n%s", p[0], p[1], d)
			}
			if len(live[p[0]]["Z"]) == 0 {
				fmt.Fprintf(&diff, "live: %s has no candle of Z yet\n", p[0])
			}
		}
		// The sink got the candles, and nothing else.
		for _, tf := range [][2]string{{"1m", "c.1m"}, {"5m", "c.5m"}} {
			if d := sameSymbols(sink.byTimeframe(tf[0]), live[tf[1]], ""); d != "" {
				fmt.Fprintf(&diff, "sink %s differs from %s:\n%s", tf[0], tf[1], d)
			}
		}
		// Live equals replay for every key the input closed.
		for _, topic := range topics {
			if d := sameSymbols(live[topic], replay[topic], "Z"); d != "" {
				fmt.Fprintf(&diff, "live %s differs from replay:\n%s", topic, d)
			}
		}
		if diff.Len() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 90s:\n%s", diff.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Quiet records are no sink errors (an unreadable candle would be one).
	if n := sumCounter(t, reg, "kandle_sink_errors_total"); n != 0 {
		t.Fatalf("the sink stage counted %v errors: it took quiet records for candles", n)
	}
	if quiet["c.1m"] == 0 || quiet["c.5m"] == 0 {
		t.Fatalf("no quiet records between the stages: c.1m %d, c.5m %d", quiet["c.1m"], quiet["c.5m"])
	}
	for _, topic := range []string{"c.15m", "d.5m", "d.15m"} {
		if quiet[topic] != 0 {
			t.Fatalf("%s has %d quiet records, but no rollup reads it", topic, quiet[topic])
		}
	}

	// The rollup stages freed every key: each key's last changelog entry is
	// a tombstone, and Pebble holds no key entry after a clean stop.
	for _, stage := range []string{"c5m", "c15m"} {
		changelog := "quiet." + stage + ".changelog"
		lastVal := map[string][]byte{}
		for _, cr := range testkit.ReadTopic(t, seeds, changelog) {
			if k := string(cr.Key); strings.HasPrefix(k, "pk") {
				lastVal[k[2:]] = cr.Value
			}
		}
		for _, sym := range []string{"A", "B", "C", "Z"} {
			v, ok := lastVal[sym]
			if !ok {
				t.Fatalf("%s: no changelog entry of %s", changelog, sym)
			}
			if v != nil {
				t.Fatalf("%s: %s's state was not freed: its last entry is %q, not a tombstone", changelog, sym, v)
			}
		}
	}
	r.stop(t)
	stopped = true
	st, err := state.Open(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, stage := range []string{"c5m", "c15m"} {
		for p := range int32(2) {
			if _, _, err := st.Load(stage, p, func(k, v []byte) error {
				return fmt.Errorf("Pebble still holds %s partition %d entry %q = %q", stage, p, k, v)
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// sumCounter sums the counter family name gathered from reg (0 when absent).
func sumCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

const kinesisQuietTopology = `
name: kinquiet
brokers: [%s]
metrics: ""
commit_interval: 50ms
sources:
  ticks:
    kind: kinesis
    partitions: 1
    kinesis: {stream: ticks, endpoint: %s, dynamodb_endpoint: %s, lease_duration: 2s, poll_interval: 50ms}
processors:
  c1m: {kind: candles, from: ticks, timeframe: 1m, max_idle: 3m, output: {topic: k.1m, partitions: 2}}
  c5m: {kind: rollup, from: c1m, timeframe: 5m, output: {topic: k.5m, partitions: 2}}
%s
dead_letter: {topic: kinquiet.dlq}
`

// kinesisDirect5m is a direct 5m processor for the replay oracle only.
const kinesisDirect5m = `  d5m: {kind: candles, from: ticks, timeframe: 5m, max_idle: 3m, output: {topic: kd.5m, partitions: 2}}`

// A Kinesis candle stage writes quiet records too: the live rollup of its
// candles closes quiet keys' windows exactly as direct aggregation does (a
// replay's direct 5m processor; Z, whose run only the wall clock ends, is
// checked to close at all).
func TestKinesisRollupOfQuietKeys(t *testing.T) {
	testkit.WallClockTest(t)
	kin, ddb := kinesisServices(t, "ticks:1")
	seeds := devBroker(t)
	load := func(extra string) *topology.Topology {
		path := filepath.Join(t.TempDir(), "kinquiet.yaml")
		if err := os.WriteFile(path, fmt.Appendf(nil, kinesisQuietTopology, seeds[0], kin.URL(), ddb.URL(), extra), 0o644); err != nil {
			t.Fatal(err)
		}
		top, err := topology.Load(path, topology.Registry{})
		if err != nil {
			t.Fatal(err)
		}
		return top
	}
	top, oracle := load(""), load(kinesisDirect5m)
	ctx := context.Background()
	client, _, err := kkin.NewClients(ctx, "us-east-1", kin.URL(), ddb.URL())
	if err != nil {
		t.Fatal(err)
	}
	keys, values := quietTrades()
	for i := 0; i < len(keys); i += 250 {
		var batch []types.PutRecordsRequestEntry
		for j := i; j < min(i+250, len(keys)); j++ {
			batch = append(batch, types.PutRecordsRequestEntry{PartitionKey: aws.String(keys[j]), Data: values[j]})
		}
		out, err := client.PutRecords(ctx, &awskinesis.PutRecordsInput{StreamName: aws.String("ticks"), Records: batch})
		if err != nil || aws.ToInt32(out.FailedRecordCount) != 0 {
			t.Fatalf("put records: %v (failed %d)", err, aws.ToInt32(out.FailedRecordCount))
		}
	}
	var rec recordingOutput
	if _, err := engine.Replay(ctx, oracle, seeds, engine.ReplayOptions{
		Started: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Out: &rec}); err != nil {
		t.Fatal(err)
	}
	direct := map[string][]string{}
	for _, v := range rec.byTopic["kd.5m"] {
		c, err := candle.ParseJSON([]byte(v))
		if err != nil {
			t.Fatal(err)
		}
		direct[c.Symbol] = append(direct[c.Symbol], v)
	}
	for _, v := range direct {
		sort.Strings(v)
	}
	if len(direct["A"]) == 0 || len(direct["B"]) == 0 {
		t.Fatalf("the replay made no direct 5m candles of A or B: %v", direct)
	}
	r := startEngine(t, top, t.TempDir(), "a")
	defer r.stop(t)
	deadline := time.Now().Add(90 * time.Second)
	for {
		roll, _ := bySymbol(t, seeds, "k.5m")
		diff := sameSymbols(roll, direct, "Z")
		for _, sym := range []string{"A", "B", "C", "Z"} {
			if len(roll[sym]) == 0 {
				diff += "no 5m candle of " + sym + " yet\n"
			}
		}
		_, quiet := bySymbol(t, seeds, "k.1m")
		if quiet == 0 {
			diff += "no quiet record on k.1m yet\n"
		}
		if diff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 90s the Kinesis stage's rollup differs from direct aggregation:\n%s", diff)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// replay --out topics writes the quiet records as the live stages do, so a
// rollup group reading the replayed topics would close quiet keys too: the
// quiet records of c.1m, fed with its candles through a rollup, give the
// replay's own 5m rollup.
func TestReplayToTopicsWritesQuietRecords(t *testing.T) {
	testkit.WallClockTest(t)
	seeds := devBroker(t)
	top, err := topology.Parse("quiet.yaml", fmt.Appendf(nil, quietTopology, seeds[0]), topology.Registry{Sinks: map[string]topology.SinkKind{
		"memory": {Name: "memory", Doc: "test sink", New: func() any { return &struct{}{} }}}})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	specs := []kafka.TopicSpec{{Name: "trades", Partitions: 1}, {Name: "quiet.dlq", Partitions: 1}}
	for _, o := range []struct {
		topic string
		n     int32
	}{{"c.1m", 2}, {"c.5m", 2}, {"c.15m", 1}, {"d.5m", 2}, {"d.15m", 1}} {
		specs = append(specs, kafka.TopicSpec{Name: o.topic, Partitions: o.n})
	}
	if _, err := kafka.EnsureTopics(context.Background(), cl, specs); err != nil {
		t.Fatal(err)
	}
	keys, values := quietTrades()
	for i := range keys {
		cl.Produce(context.Background(), &kgo.Record{Topic: "trades", Key: []byte(keys[i]), Value: values[i]}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}
	if err := cl.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, err := engine.NewTopicOutput(context.Background(), top, seeds, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Replay(context.Background(), top, seeds, engine.ReplayOptions{
		Started: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Out: out}); err != nil {
		t.Fatal(err)
	}
	// Feed c.1m as written (candles and quiet records, in partition order)
	// to a 1m→5m rollup: it must give c.5m.
	c5m, _ := bySymbol(t, seeds, "c.5m")
	tf1m, err := candle.ParseTimeframe("1m", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	tf5m, err := candle.ParseTimeframe("5m", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	roll, err := processors.NewRollup(processors.RollupConfig{From: tf1m, To: tf5m})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	quiet := 0
	var po processors.Output
	for _, r := range testkit.ReadTopic(t, seeds, "c.1m") {
		po.Reset()
		if engine.IsQuietRecord(r) {
			q, err := engine.DecodeQuiet(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			quiet++
			roll.Quiet(processors.QuietMark{Key: q.Symbol, Until: q.QuietUntil}, &po)
		} else {
			roll.Process(processors.Record{Partition: r.Partition, Offset: r.Offset, Value: r.Value}, &po)
		}
		if len(po.Rejected) > 0 {
			t.Fatalf("c.1m record %q rejected: %+v", r.Value, po.Rejected)
		}
		for _, c := range po.Candles {
			got[c.Symbol] = append(got[c.Symbol], string(c.AppendJSON(nil)))
		}
	}
	for _, v := range got {
		sort.Strings(v)
	}
	if quiet == 0 {
		t.Fatal("replay --out topics wrote no quiet record to c.1m")
	}
	if d := sameSymbols(got, c5m, ""); d != "" {
		t.Fatalf("the replayed c.1m topic, rolled up, differs from the replayed c.5m:\n%s", d)
	}
}
