package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/topology"
)

const stallTopology = `
name: stall
brokers: [%s]
metrics: ""
sources:
  trades: {topic: trades, partitions: 2}
processors:
  c1m: {kind: candles, from: trades, timeframe: 1m, output: {topic: stall.1m, partitions: 1}}
  c5m: {kind: rollup, from: c1m, timeframe: 5m, output: {topic: stall.5m, partitions: 1}}
dead_letter: {topic: stall.dlq}
`

// newStallCluster starts a kfake broker holding n generated trades on a
// two-partition topic, with the topology of the replay stall tests.
func newStallCluster(t *testing.T, n int) (*kfake.Cluster, *fixture) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "trades"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close) // also wakes every sleeping control function
	seeds := c.ListenAddrs()
	top, err := topology.Parse("stall.yaml", fmt.Appendf(nil, stallTopology, seeds[0]), topology.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, seeds: seeds, top: top}
	f.produce(n, 7, t0, 30*time.Minute)
	return c, f
}

func replayInto(ctx context.Context, f *fixture, timeout time.Duration) (string, engine.Progress, error) {
	var buf bytes.Buffer
	p, err := engine.Replay(ctx, f.top, f.seeds, engine.ReplayOptions{
		Started: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Out: &topicRecorder{w: &buf}, Timeout: timeout})
	return buf.String(), p, err
}

// A broker that takes longer than the old 5 s give-up time to answer fetches
// still yields the whole range: replay waits for what the end offsets
// promise instead of treating silence as the end.
func TestReplayWaitsForSlowBroker(t *testing.T) {
	testkit.WallClockTest(t)
	const n = 3000
	c, f := newStallCluster(t, n)
	want, wp, err := replayInto(context.Background(), f, 0)
	if err != nil {
		t.Fatal(err)
	}
	if wp.Records != n || want == "" {
		t.Fatalf("undisturbed replay read %d records and wrote %d bytes, want %d records", wp.Records, len(want), n)
	}
	var fetches atomic.Int32
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if fetches.Add(1) <= 3 { // the first fetches (and the probe behind them) each take 6.5 s
			c.SleepControl(func() { time.Sleep(6500 * time.Millisecond) })
		}
		return nil, nil, false
	})
	start := time.Now()
	got, gp, err := replayInto(context.Background(), f, 0)
	if err != nil {
		t.Fatal(err)
	}
	if gp.Records != n {
		t.Errorf("slow broker: replay read %d records, want %d", gp.Records, n)
	}
	if got != want {
		t.Errorf("slow broker: replay output differs from the undisturbed one (%d vs %d bytes)", len(got), len(want))
	}
	if !t.Failed() && (fetches.Load() == 0 || time.Since(start) < 6*time.Second) {
		t.Fatalf("the broker was not slowed down (%d fetches, %s): the test proves nothing", fetches.Load(), time.Since(start))
	}
}

// A broker that stops answering in the middle fails the replay with a clear
// error after the timeout instead of writing a partial result as if done.
func TestReplayFailsWhenBrokerGoesSilent(t *testing.T) {
	testkit.WallClockTest(t)
	c, f := newStallCluster(t, 500)
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { <-t.Context().Done() }) // never answers while the test runs
		return nil, nil, false
	})
	start := time.Now()
	_, p, err := replayInto(context.Background(), f, 3*time.Second)
	if err == nil {
		t.Fatalf("replay of a silent broker succeeded with %d records", p.Records)
	}
	if !strings.Contains(err.Error(), "no answer from the brokers") || !strings.Contains(err.Error(), "--timeout") {
		t.Errorf("error does not say what happened and what to do: %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("replay took %s to notice a silent broker with a 3s timeout", d)
	}
}

// Nothing listening at the brokers' address: a clear error, quickly.
func TestReplayFailsWhenBrokerUnreachable(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	top, err := topology.Parse("stall.yaml", fmt.Appendf(nil, stallTopology, addr), topology.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = engine.Replay(context.Background(), top, []string{addr}, engine.ReplayOptions{
		Started: time.Now(), Out: &topicRecorder{w: &bytes.Buffer{}}, Timeout: 2 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "cannot reach the brokers") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("replay against %s: err = %v, want a 'cannot reach the brokers' error naming it", addr, err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %s with a 2s timeout", d)
	}
}

// The only silence a replay may end on: what is left before the end offsets
// is an aborted transaction whose abort marker lies past them (another
// transaction was open when the replay took its end offsets). The broker
// confirms it, and the replay finishes with everything visible.
func TestReplayEndsOnAbortedTail(t *testing.T) {
	testkit.WallClockTest(t)
	const n = 200
	_, f := newStallCluster(t, n)
	ctx := context.Background()
	txn := func(id string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(f.seeds...), kgo.TransactionalID(id),
			kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		return cl
	}
	rec := func(i int) *kgo.Record {
		return &kgo.Record{Topic: "trades", Partition: 0, Key: []byte("BTC"),
			Value: fmt.Appendf(nil, `{"symbol":"BTC","ts":%d,"price":"1","qty":"1","trade_id":"x%d"}`, t0.Add(40*time.Minute).UnixMilli(), i)}
	}
	aborted, open := txn("aborted"), txn("open")
	for i := range 5 {
		if err := aborted.ProduceSync(ctx, rec(i)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := open.ProduceSync(ctx, rec(99)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := aborted.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	defer open.EndTransaction(ctx, kgo.TryAbort)
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	_, p, err := replayInto(rctx, f, 0)
	if err != nil {
		t.Fatalf("replay with an aborted tail: %v", err)
	}
	if p.Records != n {
		t.Errorf("replay read %d records, want the %d committed ones", p.Records, n)
	}
}

// --processors writes only the named processors' candles, and a rollup's
// are the same as in a full replay (its upstream still runs).
func TestReplayOnlySomeProcessors(t *testing.T) {
	testkit.WallClockTest(t)
	_, f := newStallCluster(t, 1000)
	all, _, err := replayInto(context.Background(), f, 0)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, l := range strings.Split(strings.TrimSpace(all), "\n") {
		if strings.HasPrefix(l, "stall.5m ") {
			want = append(want, l)
		}
	}
	var buf bytes.Buffer
	if _, err := engine.Replay(context.Background(), f.top, f.seeds, engine.ReplayOptions{
		Started: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Out: &topicRecorder{w: &buf}, Processors: []string{"c5m"}}); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(buf.String()); len(want) == 0 || got != strings.Join(want, "\n") {
		t.Errorf("--processors c5m wrote %d lines, want the %d c5m candles of a full replay", strings.Count(got, "\n")+1, len(want))
	}
	_, err = engine.Replay(context.Background(), f.top, f.seeds, engine.ReplayOptions{
		Started: time.Now(), Out: &topicRecorder{w: &buf}, Processors: []string{"c7m"}})
	if err == nil || !strings.Contains(err.Error(), `no processor "c7m"`) {
		t.Errorf("unknown processor: err = %v", err)
	}
}
