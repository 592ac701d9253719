package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/topology"
)

// settableClock is the wall clock of a live stage under test.
type settableClock struct{ ms atomic.Int64 }

func (c *settableClock) Now() time.Time  { return time.UnixMilli(c.ms.Load()) }
func (c *settableClock) Set(t time.Time) { c.ms.Store(t.UnixMilli()) }

// A zombie — an instance removed from the group that has not noticed — must
// not commit the candles idle advance closes on a quiet partition. Such a
// transaction consumed nothing, so no moved offset carries the generation
// check; the stage commits the unchanged position to get it. The broker
// answers the zombie's heartbeats with "all is well", so only that check can
// stop it. A fresh instance then closes the window exactly once.
func TestZombieIdleAdvanceIsFenced(t *testing.T) {
	testkit.WallClockTest(t)
	var zombie atomic.Bool
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "trades"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !zombie.Load() {
			return nil, nil, false
		}
		resp := req.(*kmsg.HeartbeatRequest).ResponseKind()
		resp.SetVersion(req.GetVersion())
		return resp, nil, true
	})
	seeds := c.ListenAddrs()
	top, err := topology.Parse("fence.yaml", fmt.Appendf(nil, `
name: fence
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
	group := top.Group + ".c1m"
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()

	minute := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &settableClock{}
	clock.Set(minute.Add(2 * time.Second))
	v := fmt.Appendf(nil, `{"symbol":"BTC","ts":%d,"price":"42","qty":"1","trade_id":1}`, minute.Add(time.Second).UnixMilli())
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "trades", Key: []byte("BTC"), Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	start := func(name string, reg *prometheus.Registry) (stop func()) {
		log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
		eng, err := engine.New(top, engine.WithStateDir(t.TempDir()), engine.WithInstanceID(name), engine.WithLogger(log),
			engine.WithClock(clock), engine.WithRegisterer(reg),
			engine.WithSessionTimeout(6*time.Second), engine.WithTransactionTimeout(6*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- eng.Run(rctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
	waitFor := func(what string, within time.Duration, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(within); !ok(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out after %s waiting for %s", within, what)
			}
		}
	}
	candles := func() []string {
		var out []string
		for _, r := range testkit.ReadTopic(t, seeds, "c.1m") {
			out = append(out, string(r.Value))
		}
		return out
	}

	regA := prometheus.NewRegistry()
	stopA := start("a", regA)
	waitFor("instance a to commit the trade's offset", 30*time.Second, func() bool {
		offs, err := adm.FetchOffsets(ctx, group)
		o, ok := offs.Lookup("trades", 0)
		return err == nil && ok && o.At == 1
	})

	// a becomes a zombie: the group drops it, a never hears of it.
	zombie.Store(true)
	dg, err := adm.DescribeGroups(ctx, group)
	if err != nil || len(dg[group].Members) != 1 {
		t.Fatalf("describe %s: %v %+v", group, err, dg)
	}
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Group = group
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID = dg[group].Members[0].MemberID
	leave.Members = append(leave.Members, m)
	resp, err := leave.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("remove a from %s: %v", group, err)
	}
	waitFor("the group to be empty", 10*time.Second, func() bool {
		dg, err := adm.DescribeGroups(ctx, group)
		return err == nil && dg[group].State == "Empty"
	})

	// The partition has been quiet for far longer than the shipped
	// idle_timeout (5s) and the clock is past the window's close plus the
	// shipped lateness (2s): a's next tick closes the trade's window, and its
	// transaction must abort.
	zombieAt := minute.Add(101 * time.Second) // the watermark moves to 99s: only the trade's window closes
	clock.Set(zombieAt)
	waitFor("a's idle-advance transaction to abort", 20*time.Second, func() bool {
		if got := candles(); len(got) > 0 {
			t.Fatalf("the zombie committed candles: %v", got)
		}
		return counter(t, regA, "kandle_transactions_total", "aborted") >= 1
	})
	time.Sleep(500 * time.Millisecond) // more ticks, more attempts
	if got := candles(); len(got) > 0 {
		t.Fatalf("the zombie committed candles: %v", got)
	}
	stopA()

	// A live member closes the window once.
	zombie.Store(false)
	regB := prometheus.NewRegistry()
	stopB := start("b", regB)
	defer stopB()
	// b measures idle_timeout from its own restore (wall-clock facts are
	// not restored), so its clock must run the shipped idle_timeout (5s)
	// past it; at 107s less the lateness the next window stays open.
	waitFor("b to restore the partition", 30*time.Second, func() bool { return gauge(t, regB, "kandle_partitions_owned") == 1 })
	clock.Set(zombieAt.Add(6 * time.Second))
	waitFor("b to close the quiet window", 30*time.Second, func() bool { return len(candles()) > 0 })
	time.Sleep(500 * time.Millisecond)
	got := candles()
	want := fmt.Sprintf(`"open_time":%d`, minute.UnixMilli())
	if len(got) != 1 || !strings.Contains(got[0], want) || !strings.Contains(got[0], `"trades":1`) {
		t.Fatalf("want exactly one candle with %s and one trade, got %v", want, got)
	}
}

// counter sums a counter's samples whose labels include value (every
// sample, when value is empty).
func counter(t testing.TB, reg *prometheus.Registry, name, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := value == ""
			for _, l := range m.GetLabel() {
				match = match || l.GetValue() == value
			}
			if match {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
