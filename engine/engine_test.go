package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/gen"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

const e2eTopology = `
name: e2e
brokers: [%s]
metrics: ""
commit_interval: 50ms
sources:
  trades: {topic: trades, partitions: 3}
processors:
  c1m: {kind: candles, from: trades, timeframe: 1m, lateness: 2s, output: {topic: c.1m, partitions: 3}}
  c5m: {kind: rollup, from: c1m, timeframe: 5m, output: {topic: c.5m, partitions: 2}}
  c1h: {kind: rollup, from: c5m, timeframe: 1h, output: {topic: c.1h, partitions: 1}}
  d5m: {kind: candles, from: trades, timeframe: 5m, lateness: 2s, output: {topic: d.5m, partitions: 3}}
dead_letter: {topic: e2e.dlq}
`

var outputTopics = []string{"c.1m", "c.5m", "c.1h", "d.5m"}

type fixture struct {
	t      *testing.T
	seeds  []string
	top    *topology.Topology
	opts   []kgo.Opt        // what the test's own clients need: TLS and SASL of a secured broker
	clock  processors.Clock // the engines' clock; nil: the wall clock
	topics []string         // output topics live() reads; nil: outputTopics
}

func newFixture(t *testing.T) *fixture { return fixtureOn(t, devBroker(t)) }

// fixtureOn is the e2e fixture on the broker at seeds, its input topic created.
func fixtureOn(t *testing.T, seeds []string) *fixture {
	t.Helper()
	top, err := topology.Parse("e2e.yaml", fmt.Appendf(nil, e2eTopology, seeds[0]), topology.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kafka.EnsureTopics(context.Background(), cl, []kafka.TopicSpec{{Name: "trades", Partitions: 3}}); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, seeds: seeds, top: top}
}

// produce sends n generated trades (with duplicates, malformed records and
// disorder within the lateness) whose event times continue from start.
func (f *fixture) produce(n int, seed uint64, start time.Time, span time.Duration) {
	f.t.Helper()
	cfg := gen.DefaultConfig()
	cfg.Symbols = []string{"BTC", "ETH", "SOL", "ADA", "DOT", "XRP", "BNB", "AVAX"}
	cfg.Count, cfg.Seed, cfg.Start, cfg.Span = n, seed, start, span
	cfg.Disorder, cfg.DupRate, cfg.MalformedRate = time.Second, 0.02, 0.01
	g, err := gen.New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(f.seeds...)}, f.opts...)...)
	if err != nil {
		f.t.Fatal(err)
	}
	defer cl.Close()
	// Records carry their event time as the Kafka timestamp, as most trade
	// producers do: replay --from TIME finds its start offsets by it.
	dec, err := processors.NewDecoder(processors.DecoderConfig{Fields: processors.Fields{Key: "symbol", Time: "ts", Price: "price", Qty: "qty", ID: "trade_id"}})
	if err != nil {
		f.t.Fatal(err)
	}
	last := start
	for {
		key, value, ok := g.Next()
		if !ok {
			break
		}
		var tr candle.Trade
		if _, ok := dec.Decode(value, &tr); ok {
			last = time.UnixMilli(tr.TS)
		}
		cl.Produce(context.Background(), &kgo.Record{Topic: "trades", Key: key, Value: value, Timestamp: last}, func(_ *kgo.Record, err error) {
			if err != nil {
				f.t.Error(err)
			}
		})
	}
	if err := cl.Flush(context.Background()); err != nil {
		f.t.Fatal(err)
	}
}

type running struct {
	cancel context.CancelFunc
	done   chan error
}

func (f *fixture) start(stateDir, instance string, extra ...engine.Option) *running {
	f.t.Helper()
	level := slog.LevelWarn
	_ = level.UnmarshalText([]byte(os.Getenv("KANDLE_TEST_LOG"))) // e.g. KANDLE_TEST_LOG=info when debugging
	log := slog.New(slog.NewTextHandler(testWriter{f.t}, &slog.HandlerOptions{Level: level}))
	opts := []engine.Option{engine.WithStateDir(stateDir), engine.WithInstanceID(instance), engine.WithLogger(log),
		engine.WithSessionTimeout(6 * time.Second), engine.WithTransactionTimeout(6 * time.Second)}
	if f.clock != nil {
		opts = append(opts, engine.WithClock(f.clock))
	}
	opts = append(opts, extra...)
	eng, err := engine.New(f.top, opts...)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- eng.Run(ctx) }()
	return r
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("engine: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("engine did not stop within 60s of SIGTERM-like cancel")
	}
}

// replay runs `kandle replay` in process and returns its candles per topic.
func (f *fixture) replay() map[string][]string {
	f.t.Helper()
	var buf bytes.Buffer
	_, err := engine.Replay(context.Background(), f.top, f.seeds, engine.ReplayOptions{
		Started: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Out: &topicRecorder{w: &buf}})
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		topic, c, _ := strings.Cut(l, " ")
		out[topic] = append(out[topic], c)
	}
	for k := range out {
		sort.Strings(out[k])
	}
	return out
}

// live reads the committed candles of every output topic.
func (f *fixture) live() map[string][]string {
	out := map[string][]string{}
	topics := f.topics
	if topics == nil {
		topics = outputTopics
	}
	for _, topic := range topics {
		for _, r := range testkit.ReadTopic(f.t, f.seeds, topic, f.opts...) {
			if engine.IsQuietRecord(r) {
				continue // rollups' control record, not a candle
			}
			out[topic] = append(out[topic], string(r.Value))
		}
		sort.Strings(out[topic])
	}
	return out
}

// waitFor polls the live outputs until those of the windows the input closes
// (see closedByInput) equal want, or the time is up, then reports the first
// difference.
func (f *fixture) waitFor(want map[string][]string, within time.Duration) {
	f.t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := closedByInput(f.t, want, f.live())
		diff := diffOutputs(want, got)
		if diff == "" {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("live outputs differ from replay after %s:\n%s", within, diff)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// closedByInput drops the live candles of windows the replay (want) never
// closes: with the shipped idle_timeout a caught-up, quiet live partition
// advances its watermark by the wall clock and closes the windows after the
// input's last trade, which a replay, depending only on its input, cannot.
// A live candle is kept when its open_time is at most the replay's last
// open_time of the same symbol in the same topic; every candle of the
// windows the input closes is compared exactly.
func closedByInput(t *testing.T, want, got map[string][]string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for topic, cs := range got {
		last := map[string]int64{}
		for _, js := range want[topic] {
			c, err := candle.ParseJSON([]byte(js))
			if err != nil {
				t.Fatalf("replay wrote a record that is not a candle to %s: %s", topic, js)
			}
			if o, ok := last[c.Symbol]; !ok || c.OpenTime > o {
				last[c.Symbol] = c.OpenTime
			}
		}
		for _, js := range cs {
			c, err := candle.ParseJSON([]byte(js))
			if err != nil {
				out[topic] = append(out[topic], js) // reported as unexpected
				continue
			}
			if o, ok := last[c.Symbol]; ok && c.OpenTime <= o {
				out[topic] = append(out[topic], js)
			}
		}
	}
	return out
}

// waitIdleAdvance waits until the live group has closed a 1m window after
// the last one the input (want, a replay) closes: only the shipped
// idle_timeout's advance by the clock does that. Then the windows the input
// closes must still equal want.
func (f *fixture) waitIdleAdvance(want map[string][]string, within time.Duration) {
	f.t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for {
		got := f.live()
		if n := len(got["c.1m"]) - len(closedByInput(f.t, want, got)["c.1m"]); n > 0 {
			f.t.Logf("idle advance closed %d 1m windows after the input's (waited %s)", n, time.Since(start).Round(time.Millisecond))
			if diff := diffOutputs(want, closedByInput(f.t, want, got)); diff != "" {
				f.t.Fatalf("after the idle advance, live outputs differ from replay:\n%s", diff)
			}
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("no window after the input's closed by idle advance within %s", within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func diffOutputs(want, got map[string][]string) string {
	var b strings.Builder
	for _, topic := range outputTopics {
		w, g := want[topic], got[topic]
		wset := map[string]int{}
		for _, c := range w {
			wset[c]++
		}
		gset := map[string]int{}
		for _, c := range g {
			gset[c]++
		}
		for c, n := range gset {
			if n > 1 {
				fmt.Fprintf(&b, "%s: duplicate ×%d %s\n", topic, n, c)
			}
			if wset[c] == 0 {
				fmt.Fprintf(&b, "%s: unexpected %s\n", topic, c)
			}
		}
		missing := 0
		for c := range wset {
			if gset[c] == 0 {
				if missing < 3 {
					fmt.Fprintf(&b, "%s: missing %s\n", topic, c)
				}
				missing++
			}
		}
		if missing > 0 {
			fmt.Fprintf(&b, "%s: %d of %d candles missing\n", topic, missing, len(w))
		}
	}
	return b.String()
}

// recordingOutput collects replay candles per topic.
type recordingOutput struct{ byTopic map[string][]string }

func (r *recordingOutput) Candle(_ string, topic string, c *candle.Candle) error {
	if r.byTopic == nil {
		r.byTopic = map[string][]string{}
	}
	r.byTopic[topic] = append(r.byTopic[topic], string(c.AppendJSON(nil)))
	return nil
}
func (r *recordingOutput) DeadLetter(string, *processors.Rejection) error { return nil }
func (r *recordingOutput) Close(context.Context) error                    { return nil }

type topicRecorder struct{ w *bytes.Buffer }

func (r *topicRecorder) Candle(_ string, topic string, c *candle.Candle) error {
	r.w.WriteString(topic + " ")
	r.w.Write(c.AppendJSON(nil))
	r.w.WriteByte('\n')
	return nil
}
func (r *topicRecorder) DeadLetter(string, *processors.Rejection) error { return nil }
func (r *topicRecorder) Close(context.Context) error                    { return nil }

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// The live consumer group's read-committed outputs equal a replay of the
// same input exactly, and the 1m→5m rollup equals direct 5m aggregation.
// Both in fused mode (c5m runs in c1m's transaction; c1h, whose input has
// another partition count, reads its topic) and unfused.
func TestLiveEqualsReplay(t *testing.T) {
	testkit.WallClockTest(t)
	eachFuseMode(t, testLiveEqualsReplay)
}

func testLiveEqualsReplay(t *testing.T, mode string) {
	f := newFixture(t)
	setFuse(f.top, mode)
	f.produce(20000, 1, t0, 3*time.Hour)
	want := f.replay()
	if len(want["c.1m"]) < 8*170 || len(want["c.1h"]) < 8*2 {
		t.Fatalf("replay made too few candles: %d 1m, %d 1h", len(want["c.1m"]), len(want["c.1h"]))
	}
	if fmt.Sprint(want["c.5m"]) != fmt.Sprint(want["d.5m"]) {
		t.Fatalf("rollup 1m→5m differs from direct 5m:\n%s", diffOutputs(map[string][]string{"c.5m": want["d.5m"]}, map[string][]string{"c.5m": want["c.5m"]}))
	}
	r := f.start(t.TempDir(), "a")
	defer r.stop(t)
	f.waitFor(want, 90*time.Second)
	f.waitIdleAdvance(want, 60*time.Second)
	f.checkFusedOffsets(mode)
}

// checkFusedOffsets checks what `kandle offsets` says of c5m, caught up:
// fused into c1m (its position the one its changelog holds, at the end of
// c.1m) in fused mode; a stage of its own otherwise. c1h (its input has
// another partition count) is never fused.
func (f *fixture) checkFusedOffsets(mode string) {
	f.t.Helper()
	all, err := engine.Offsets(context.Background(), f.top, f.seeds)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, g := range all {
		want := ""
		if g.Name == "c5m" && mode == "fused" {
			want = "c1m"
		}
		if g.FusedInto != want {
			f.t.Errorf("offsets: %s fused into %q, want %q", g.Name, g.FusedInto, want)
		}
		if g.FusedInto == "" {
			continue
		}
		for _, p := range g.Topics["c.1m"] {
			if p.Committed < 0 || p.Lag != 0 {
				f.t.Errorf("offsets: fused %s partition %d at %d of %d (lag %d), want caught up", g.Name, p.Partition, p.Committed, p.End, p.Lag)
			}
		}
	}
}

// Stopping mid-stream and restarting (same Pebble dir, then an empty one that
// must rebuild from the changelog) loses and doubles nothing.
//
// The engines run with the shipped idle_timeout, max_future and lateness on
// a clock that ticks in real time from the end of the input produced so far
// (clockAt), as if the input were live: a caught-up instance advances by
// that clock, and the next segment of input starts where the clock stood at
// the stop, as trades do after a restart.
//
// Both fused and unfused (see TestLiveEqualsReplay).
func TestRestartResumesExactly(t *testing.T) {
	testkit.WallClockTest(t)
	eachFuseMode(t, func(t *testing.T, mode string) { testRestartResumesExactly(t, [3]string{mode, mode, mode}) })
}

// Switching fusion between restarts (every instance stopped, see "Fused
// chains" in the package doc) loses and doubles nothing: a rollup that ran
// as a stage of its own is fused from its position on its input topic, and
// one that ran fused resumes its stage from the position its fused commits
// kept, on the same disk and on an empty one.
func TestFuseSwitchResumesExactly(t *testing.T) {
	testkit.WallClockTest(t)
	testRestartResumesExactly(t, [3]string{"unfused", "fused", "unfused"})
}

// A rollup that ran as a stage of its own and had not read the tail of its
// input when every instance stopped takes that tail once it is fused: here
// c5m (and c1h, which reads it) did not run at all before, so at its
// restore the fused c5m reads all of c.1m written so far, produces what it
// makes in its first transaction, then carries on from memory. Nothing is
// lost or doubled.
func TestFusedTakesUnreadInput(t *testing.T) {
	testkit.WallClockTest(t)
	f := newFixture(t)
	dir := t.TempDir()
	setFuse(f.top, "unfused")
	f.produce(6000, 1, t0, time.Hour)
	f.clock = clockAt(t0.Add(time.Hour))
	r := f.start(dir, "a", engine.WithOnly("c1m", "d5m"))
	want := f.replay()
	f.topics = []string{"c.1m", "d.5m"}
	f.waitFor(map[string][]string{"c.1m": want["c.1m"], "d.5m": want["d.5m"]}, 60*time.Second)
	r.stop(t)
	if n := len(testkit.ReadTopic(t, f.seeds, "c.5m")); n != 0 {
		t.Fatalf("c.5m holds %d records before c5m ever ran", n)
	}

	f.topics = nil
	next, end := segmentAfter(f.clock)
	f.produce(6000, 2, next, end.Sub(next))
	f.clock = clockAt(end)
	setFuse(f.top, "fused")
	r = f.start(dir, "a")
	defer r.stop(t)
	f.waitFor(f.replay(), 60*time.Second)
}

// testRestartResumesExactly runs the three segments of
// TestRestartResumesExactly with fusion modes[i] each.
func testRestartResumesExactly(t *testing.T, modes [3]string) {
	f := newFixture(t)
	setFuse(f.top, modes[0])
	dir := t.TempDir()
	f.produce(6000, 1, t0, time.Hour)
	f.clock = clockAt(t0.Add(time.Hour))
	r := f.start(dir, "a")
	want := f.replay()
	f.waitFor(want, 60*time.Second)
	f.waitIdleAdvance(want, 60*time.Second) // the stop comes after an advance by the clock
	r.stop(t)

	next, end := segmentAfter(f.clock)
	f.produce(6000, 2, next, end.Sub(next))
	f.clock = clockAt(end)
	setFuse(f.top, modes[1])
	r = f.start(dir, "a")
	want = f.replay()
	f.waitFor(want, 60*time.Second)
	f.waitIdleAdvance(want, 60*time.Second)
	r.stop(t)

	next, end = segmentAfter(f.clock)
	f.produce(6000, 3, next, end.Sub(next))
	f.clock = clockAt(end)
	setFuse(f.top, modes[2])
	r = f.start(t.TempDir(), "b") // a new machine: state comes from the changelog
	defer r.stop(t)
	f.waitFor(f.replay(), 60*time.Second)
}

// segmentAfter returns the span of the next input after an engine on clock
// stopped: from the clock's time now (an idle advance moved no watermark
// beyond it less the lateness) to a whole minute about an hour later, so the
// last window the input opens ends where the clock starts for the next run
// and an idle advance closes it idle_timeout after the catch-up.
func segmentAfter(clock processors.Clock) (next, end time.Time) {
	next = clock.Now()
	return next, next.Add(time.Hour).Truncate(time.Minute)
}

// shiftedClock is the wall clock moved to another instant: it ticks in real
// time, so idle_timeout and max_future work as in production, against input
// stamped in the past.
type shiftedClock struct{ off time.Duration }

func (c shiftedClock) Now() time.Time { return time.Now().Add(c.off) }

// clockAt returns a clock that reads at now, and ticks on from there. An
// engine on it sees input stamped up to at as just produced: none of it is
// beyond max_future, and an idle advance moves a watermark to at most the
// clock's time less the lateness, never past input stamped after the clock's
// time at the engine's stop.
func clockAt(at time.Time) shiftedClock { return shiftedClock{off: time.Until(at)} }

// TestMain doubles as a kandle instance for tests that need one in its own
// process (to SIGKILL it): with KANDLE_TEST_TOPOLOGY set, the test binary
// runs that topology until it is killed or gets SIGTERM.
func TestMain(m *testing.M) {
	// The AWS SDK's default credential chain reads static test keys and a
	// region from the environment, as an operator would point it at an
	// emulator. They are set once here (before any child instance is
	// started, which inherits them) rather than per test with t.Setenv,
	// which a parallel test may not call.
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
		"AWS_REGION": "us-east-1"} {
		if err := os.Setenv(k, v); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	if path := os.Getenv("KANDLE_TEST_TOPOLOGY"); path != "" {
		os.Exit(runChild(path, os.Getenv("KANDLE_TEST_INSTANCE"), os.Getenv("KANDLE_TEST_STATE")))
	}
	os.Exit(m.Run())
}

func runChild(path, instance, stateDir string) int {
	top, err := topology.Load(path, topology.Registry{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	eng, err := engine.New(top, engine.WithInstanceID(instance), engine.WithStateDir(stateDir), engine.WithLogger(log),
		engine.WithSessionTimeout(6*time.Second), engine.WithTransactionTimeout(6*time.Second))
	if err == nil {
		err = eng.Run(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// A replay of a range — from a time in the middle of the stream (with its
// warm-up) and optionally a subset of partitions — writes exactly the
// candles the live group wrote for that range.
func TestReplayRangeEqualsLive(t *testing.T) {
	testkit.WallClockTest(t)
	f := newFixture(t)
	// A sparse key that trades once, first: its gap candles after --from
	// repeat a close from long before it, which only the warm-up can know.
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.seeds...))
	if err != nil {
		t.Fatal(err)
	}
	v := fmt.Appendf(nil, `{"symbol":"RARE","ts":%d,"price":"7.25","qty":"1","trade_id":1}`, t0.Add(10*time.Minute).UnixMilli())
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "trades", Key: []byte("RARE"), Value: v, Timestamp: t0.Add(10 * time.Minute)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	f.produce(12000, 7, t0, 4*time.Hour)
	want := f.replay()
	r := f.start(t.TempDir(), "a")
	defer r.stop(t)
	f.waitFor(want, 90*time.Second)
	live := closedByInput(t, want, f.live())

	from := t0.Add(90 * time.Minute)
	for _, parts := range [][]int32{nil, {1}} {
		var rec recordingOutput
		if _, err := engine.Replay(context.Background(), f.top, f.seeds, engine.ReplayOptions{
			Started: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), From: engine.Bound{Kind: engine.BoundTime, Time: from},
			Partitions: parts, Out: &rec}); err != nil {
			t.Fatal(err)
		}
		keys := partitionKeys(t, f, parts) // the symbols of the replayed source partitions
		expect := map[string][]string{}
		for topic, cs := range live {
			for _, js := range cs {
				c, err := candle.ParseJSON([]byte(js))
				if err != nil {
					t.Fatal(err)
				}
				if c.OpenTime >= from.UnixMilli() && keys[c.Symbol] {
					expect[topic] = append(expect[topic], js)
				}
			}
		}
		for k := range rec.byTopic {
			sort.Strings(rec.byTopic[k])
		}
		rareGaps := 0
		for _, js := range expect["c.1m"] {
			if strings.Contains(js, `"symbol":"RARE"`) && strings.Contains(js, `"gap":true`) {
				rareGaps++
			}
		}
		t.Logf("partitions %v: %d RARE gap candles after --from, %d 1h candles", parts, rareGaps, len(expect["c.1h"]))
		if diff := diffOutputs(expect, rec.byTopic); diff != "" || len(expect["c.1h"]) == 0 || (keys["RARE"] && rareGaps < 100) {
			t.Fatalf("replay --from %s --partitions %v differs from the live candles of the range:\n%s", from.Format(time.RFC3339), parts, diff)
		}
	}
}

// partitionKeys returns the symbols whose trades are in the given source
// partitions (all when parts is nil).
func partitionKeys(t *testing.T, f *fixture, parts []int32) map[string]bool {
	want := map[int32]bool{}
	for _, p := range parts {
		want[p] = true
	}
	keys := map[string]bool{}
	for _, r := range testkit.ReadTopic(t, f.seeds, "trades") {
		if len(parts) == 0 || want[r.Partition] {
			keys[string(r.Key)] = true
		}
	}
	return keys
}

// Live mode only: a partition that stays quiet for idle_timeout advances its
// watermark by the wall clock, so the last window closes without any later
// trade. A replay of the same input never does (its candles depend only on
// its input). The processor runs with the shipped idle_timeout, max_future
// and lateness.
func TestIdleAdvanceLiveOnly(t *testing.T) {
	testkit.WallClockTest(t)
	seeds := devBroker(t)
	top, err := topology.Parse("idle.yaml", fmt.Appendf(nil, `
name: idle
brokers: [%s]
metrics: ""
sources:
  trades: {topic: trades, partitions: 1}
processors:
  c1m: {kind: candles, from: trades, timeframe: 1m, output: {topic: c.1m, partitions: 1}}
`, seeds[0]), topology.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kafka.EnsureTopics(context.Background(), cl, []kafka.TopicSpec{{Name: "trades", Partitions: 1}}); err != nil {
		t.Fatal(err)
	}
	// One trade in the minute before the current one: only the wall clock can close its window.
	open := time.Now().Add(-time.Minute).Truncate(time.Minute)
	v := fmt.Appendf(nil, `{"symbol":"BTC","ts":%d,"price":"42","qty":"1","trade_id":1}`, open.Add(time.Second).UnixMilli())
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "trades", Key: []byte("BTC"), Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`"open_time":%d`, open.UnixMilli())

	var rec recordingOutput
	if _, err := engine.Replay(context.Background(), top, seeds, engine.ReplayOptions{Started: time.Now(), Out: &rec}); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.byTopic["c.1m"]); n != 0 {
		t.Fatalf("replay closed %d windows by the wall clock: %v", n, rec.byTopic["c.1m"])
	}

	f := &fixture{t: t, seeds: seeds, top: top}
	r := f.start(t.TempDir(), "a")
	defer r.stop(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got []string
		for _, r := range testkit.ReadTopic(t, seeds, "c.1m") {
			got = append(got, string(r.Value))
		}
		if len(got) > 0 && strings.Contains(got[0], want) && strings.Contains(got[0], `"trades":1`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the quiet partition's window was not closed by idle advance; candles: %v", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// devBroker starts a dev broker on a free loopback port for one test (closed
// when the test ends) and returns its seed addresses.
func devBroker(t *testing.T) []string {
	t.Helper()
	b, err := kafka.StartDevBroker(kafka.WithListen("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addrs()
}
