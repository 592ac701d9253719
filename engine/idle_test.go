package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/topology"
)

// idleTopology runs one candle processor with the shipped defaults
// (idle_timeout, lateness, max_future as a user gets them).
const idleTopology = `
name: idle
brokers: [%s]
metrics: ""
sources:
  trades: {topic: trades, partitions: %d}
processors:
  c1m: {kind: candles, from: trades, timeframe: 1m, output: {topic: c.1m, partitions: 1}}
`

// kfakeRig is an in-process kfake cluster with kandle instances driven by
// one settable wall clock.
type kfakeRig struct {
	t     *testing.T
	c     *kfake.Cluster
	seeds []string
	top   *topology.Topology
	cl    *kgo.Client
	adm   *kadm.Client
	clock *settableClock
	group string

	holdFetch  atomic.Bool  // hold the stages' fetches until released
	heldFetch  atomic.Int64 // fetches being held
	release    chan struct{}
	relOnce    sync.Once
	listEnds   atomic.Int64 // ListOffsets requests for the trades topic
	tradesID   [16]byte
	minute     time.Time
	idleTimout time.Duration
}

func newKfakeRig(t *testing.T, partitions int, opts ...kfake.Opt) *kfakeRig {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(int32(partitions), "trades")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	r := &kfakeRig{t: t, c: c, seeds: c.ListenAddrs(), clock: &settableClock{}, release: make(chan struct{})}
	r.top, err = topology.Parse("idle.yaml", fmt.Appendf(nil, idleTopology, r.seeds[0], partitions), topology.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	r.group = r.top.Group + ".c1m"
	r.idleTimout = r.top.Processors["c1m"].IdleTimeout
	if r.idleTimout <= 0 {
		t.Fatalf("the shipped idle_timeout is %s: these tests need idle advance on", r.idleTimout)
	}
	if r.cl, err = kgo.NewClient(kgo.SeedBrokers(r.seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.cl.Close)
	r.adm = kadm.NewClient(r.cl)
	td, err := r.adm.ListTopics(context.Background(), "trades")
	if err != nil {
		t.Fatal(err)
	}
	r.tradesID = td["trades"].ID
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !r.holdFetch.Load() || r.fetchesOther(req.(*kmsg.FetchRequest)) {
			return nil, nil, false
		}
		r.heldFetch.Add(1)
		c.SleepControl(func() { <-r.release })
		r.heldFetch.Add(-1)
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, tp := range req.(*kmsg.ListOffsetsRequest).Topics {
			if tp.Topic == "trades" {
				r.listEnds.Add(1)
			}
		}
		return nil, nil, false
	})
	r.minute = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.clock.Set(r.minute.Add(2 * time.Second))
	return r
}

// fetchesOther reports whether a fetch names a topic other than trades. The
// stages' consumers use incremental fetch sessions, whose requests name no
// topic once nothing changes; the test's own reader names its topics in
// every request (it has fetch sessions off).
func (r *kfakeRig) fetchesOther(req *kmsg.FetchRequest) bool {
	for _, tp := range req.Topics {
		if (tp.Topic != "" && tp.Topic != "trades") || (tp.TopicID != [16]byte{} && tp.TopicID != r.tradesID) {
			return true
		}
	}
	return false
}

func (r *kfakeRig) releaseFetches() {
	r.holdFetch.Store(false)
	r.relOnce.Do(func() { close(r.release) })
}

// start runs an instance (opts after the rig's own); stop cancels it (a
// graceful stop) and checks its error.
func (r *kfakeRig) start(name, stateDir string, reg *prometheus.Registry, opts ...engine.Option) (stop func()) {
	r.t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{r.t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	eng, err := engine.New(r.top, append([]engine.Option{engine.WithStateDir(stateDir), engine.WithInstanceID(name), engine.WithLogger(log),
		engine.WithClock(r.clock), engine.WithRegisterer(reg),
		engine.WithSessionTimeout(6 * time.Second), engine.WithTransactionTimeout(6 * time.Second)}, opts...)...)
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				r.t.Errorf("%s: %v", name, err)
			}
		})
	}
	r.t.Cleanup(stop)
	return stop
}

func (r *kfakeRig) trade(p int32, id int, at time.Duration) {
	r.t.Helper()
	v := fmt.Appendf(nil, `{"symbol":"BTC","ts":%d,"price":"42","qty":"1","trade_id":%d}`, r.minute.Add(at).UnixMilli(), id)
	if err := r.cl.ProduceSync(context.Background(), &kgo.Record{Topic: "trades", Partition: p, Key: []byte("BTC"), Value: v}).FirstErr(); err != nil {
		r.t.Fatal(err)
	}
}

func (r *kfakeRig) committed(p int32) int64 {
	offs, err := r.adm.FetchOffsets(context.Background(), r.group)
	if err != nil {
		return -1
	}
	o, ok := offs.Lookup("trades", p)
	if !ok {
		return -1
	}
	return o.At
}

func (r *kfakeRig) waitFor(what string, within time.Duration, ok func() bool) {
	r.t.Helper()
	for deadline := time.Now().Add(within); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out after %s waiting for %s", within, what)
		}
	}
}

func (r *kfakeRig) read(topic string) []string {
	var out []string
	for _, rec := range testkit.ReadTopic(r.t, r.seeds, topic, kgo.DisableFetchSessions()) {
		out = append(out, string(rec.Value))
	}
	return out
}

// A partition with a backlog — here records the broker has but a slow fetch
// has not delivered yet — does not advance by the wall clock, however long
// the wall clock says it has been quiet: its records, not the clock, move
// its watermark. Once they arrive and the partition is caught up and quiet
// for idle_timeout, it advances, and nothing was late.
func TestIdleAdvanceNotWhileBehind(t *testing.T) {
	testkit.WallClockTest(t)
	r := newKfakeRig(t, 1)
	reg := prometheus.NewRegistry()
	r.start("a", t.TempDir(), reg)
	r.trade(0, 1, time.Second)
	r.waitFor("the first trade to commit", 30*time.Second, func() bool { return r.committed(0) == 1 })

	// The consumer falls behind: the second trade is on the broker, but its
	// fetch does not come back.
	r.holdFetch.Store(true)
	r.waitFor("a fetch of the stage to be held", 30*time.Second, func() bool { return r.heldFetch.Load() > 0 })
	r.trade(0, 2, 30*time.Second)
	// The wall clock runs on, twice past idle_timeout: each time the stage
	// checks its position against the end offset, finds itself behind and
	// restarts its idle clock.
	for i := range int64(2) {
		probes := r.listEnds.Load()
		r.clock.Set(r.minute.Add(2*time.Second + time.Duration(i+1)*(r.idleTimout+time.Minute)))
		r.waitFor("the stage to check its position against the end offset", 30*time.Second, func() bool {
			return r.listEnds.Load() > probes
		})
	}
	if got := r.read("c.1m"); len(got) > 0 {
		t.Fatalf("a partition that is behind advanced by the wall clock and closed: %v", got)
	}

	r.releaseFetches()
	r.waitFor("the second trade to commit", 30*time.Second, func() bool { return r.committed(0) == 2 })
	r.clock.Set(r.minute.Add(2*time.Second + 3*(r.idleTimout+time.Minute)))
	r.waitFor("the quiet, caught-up partition to close its window", 30*time.Second, func() bool { return len(r.read("c.1m")) > 0 })
	got := r.read("c.1m")
	want := fmt.Sprintf(`"open_time":%d`, r.minute.UnixMilli())
	if !strings.Contains(got[0], want) || !strings.Contains(got[0], `"trades":2`) {
		t.Fatalf("want the window %s closed with both trades, got %v", want, got)
	}
	if dl := r.read(r.top.DeadLetter.Topic); len(dl) > 0 {
		t.Fatalf("on-time trades were dead-lettered: %v", dl)
	}
}

// A partition's new owner measures idle_timeout from its own restore: the
// previous owner's last record time is not restored, so a failover long
// after the last trade does not close windows at once. A caught-up quiet
// partition then advances after idle_timeout of the new owner's wall time.
func TestIdleAdvanceFreshOwnerWaitsIdleTimeout(t *testing.T) {
	testkit.WallClockTest(t)
	r := newKfakeRig(t, 1)
	stopA := r.start("a", t.TempDir(), prometheus.NewRegistry())
	r.trade(0, 1, time.Second)
	r.waitFor("the trade to commit", 30*time.Second, func() bool { return r.committed(0) == 1 })
	stopA()

	// Long after the last trade, a new instance (empty disk) takes over.
	restoredAt := r.minute.Add(10 * time.Minute)
	r.clock.Set(restoredAt)
	regB := prometheus.NewRegistry()
	r.start("b", t.TempDir(), regB)
	r.waitFor("b to restore the partition", 30*time.Second, func() bool {
		return gauge(t, regB, "kandle_partitions_owned") == 1
	})
	// Just short of idle_timeout of b's own time: b must not advance.
	r.clock.Set(restoredAt.Add(r.idleTimout - 100*time.Millisecond))
	time.Sleep(time.Second) // many loop iterations (commit interval 25ms)
	if got := r.read("c.1m"); len(got) > 0 {
		t.Fatalf("the new owner advanced before idle_timeout of its own wall time: %v", got)
	}
	r.clock.Set(restoredAt.Add(r.idleTimout))
	r.waitFor("the new owner to close the quiet window", 30*time.Second, func() bool { return len(r.read("c.1m")) > 0 })
	got := r.read("c.1m")
	if !strings.Contains(got[0], fmt.Sprintf(`"open_time":%d`, r.minute.UnixMilli())) || !strings.Contains(got[0], `"trades":1`) {
		t.Fatalf("want the trade's window closed with its trade, got %v", got)
	}
}

// gauge sums a gauge's samples.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}
