package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/topology"
)

const staticTopology = `
name: static
brokers: [%s]
metrics: ""
commit_interval: 50ms
sources:
  trades: {topic: trades, partitions: 4}
processors:
  c1m: {kind: candles, from: trades, timeframe: 1m, lateness: 2s, output: {topic: c.1m, partitions: 4}}
dead_letter: {topic: static.dlq}
`

// member is one running engine of the static-membership test, with its own
// metrics registry so the test can read what it owns.
type member struct {
	reg      *prometheus.Registry
	run      *running
	sessions *atomic.Int64 // group sessions begun
}

// sessionCounter is a slog handler that counts the group sessions the
// engine's Kafka clients begin (kgo logs "new group session begun" after
// every join and sync, i.e. once per rebalance the member takes part in),
// and passes warnings and errors on to the test log.
type sessionCounter struct {
	n    *atomic.Int64
	next slog.Handler
}

func (c sessionCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c sessionCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "kafka: new group session begun" {
		c.n.Add(1)
	}
	if r.Level >= slog.LevelWarn {
		return c.next.Handle(ctx, r)
	}
	return nil
}
func (c sessionCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return sessionCounter{c.n, c.next.WithAttrs(as)}
}
func (c sessionCounter) WithGroup(name string) slog.Handler {
	return sessionCounter{c.n, c.next.WithGroup(name)}
}

func startMember(t *testing.T, top *topology.Topology, instance string, static bool) *member {
	t.Helper()
	reg := prometheus.NewRegistry()
	sessions := new(atomic.Int64)
	log := slog.New(sessionCounter{sessions, slog.NewTextHandler(testWriter{t}, nil)})
	eng, err := engine.New(top, engine.WithInstanceID(instance), engine.WithStaticMembership(static),
		engine.WithRegisterer(reg), engine.WithLogger(log), engine.WithStateDir(t.TempDir()),
		// Long enough for the restart below; a static member that stopped
		// keeps its partitions this long.
		engine.WithSessionTimeout(30*time.Second), engine.WithTransactionTimeout(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- eng.Run(ctx) }()
	return &member{reg: reg, run: r, sessions: sessions}
}

// assignment returns the group's members by instance (or member) id with
// their partitions of topic, once the group is stable.
func assignment(t *testing.T, adm *kadm.Client, group, topic string) map[string][]int32 {
	t.Helper()
	dg, err := adm.DescribeGroups(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	g := dg[group]
	if g.Err != nil || g.State != "Stable" {
		return nil
	}
	out := map[string][]int32{}
	for _, m := range g.Members {
		id := m.MemberID // unique; the dev broker does not report client ids
		if m.InstanceID != nil {
			id = *m.InstanceID
		}
		if c, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range c.Topics {
				if tp.Topic == topic {
					out[id] = slices.Sorted(slices.Values(tp.Partitions))
				}
			}
		}
	}
	return out
}

// TestStaticMembershipRestartWithoutRebalance restarts one of two instances
// and watches the other. As static members (what the Helm chart runs): the
// stop rebalances nothing (the other begins no group session while the
// instance is down), the restarted instance gets its own partitions back,
// the other never gains or loses one, and the restarted instance's
// transactions commit. As dynamic members (the control): the stop hands the
// stopped instance's partitions to the other in a new group session, so the
// session count does see rebalances.
func TestStaticMembershipRestartWithoutRebalance(t *testing.T) {
	testkit.WallClockTest(t)
	for _, static := range []bool{true, false} {
		t.Run(fmt.Sprintf("static=%v", static), func(t *testing.T) {
			b, err := kafka.StartDevBroker(kafka.WithListen("127.0.0.1:0"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.Close)
			top, err := topology.Parse("static.yaml", fmt.Appendf(nil, staticTopology, b.Addrs()[0]), topology.Registry{})
			if err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if _, err := kafka.EnsureTopics(context.Background(), cl, []kafka.TopicSpec{{Name: "trades", Partitions: 4}}); err != nil {
				t.Fatal(err)
			}
			adm := kadm.NewClient(cl)
			group := top.Group + ".c1m"

			a := startMember(t, top, "kandle-0", static)
			other := startMember(t, top, "kandle-1", static)
			defer other.run.stop(t)
			owned := func(m *member) float64 {
				return gauge(t, m.reg, "kandle_partitions_owned") // the only stage: c1m
			}
			waitUntil(t, 30*time.Second, "both instances own 2 partitions", func() bool {
				return owned(a) == 2 && owned(other) == 2 && len(assignment(t, adm, group, "trades")) == 2
			})
			before := assignment(t, adm, group, "trades")
			// The other instance's group sessions so far (one per rebalance
			// it took part in): a rebalance from here on begins another.
			settled := other.sessions.Load()
			if settled == 0 {
				t.Fatal("counted no group session of kandle-1: has kgo's log message changed?")
			}

			a.run.stop(t)
			if !static {
				waitUntil(t, 30*time.Second, "the group moves the stopped instance's partitions", func() bool {
					return owned(other) == 4
				})
				t.Logf("kandle-1: %d group sessions before the stop, %d after", settled, other.sessions.Load())
				if other.sessions.Load() == settled {
					t.Fatal("the other instance took over partitions without a new group session: the test cannot see rebalances")
				}
				return
			}
			// Watch kandle-1's partitions through the restart: it must
			// neither gain (the group moving kandle-0's) nor lose any.
			var ownedSeen sync.Map
			watchCtx, stopWatch := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() {
				for watchCtx.Err() == nil {
					ownedSeen.Store(owned(other), true)
					time.Sleep(10 * time.Millisecond)
				}
			})
			defer func() { stopWatch(); wg.Wait() }()

			// Down, but inside the session timeout: the group keeps the
			// stopped member with its partitions, and nothing rebalances.
			time.Sleep(2 * time.Second)
			if got := assignment(t, adm, group, "trades"); !mapsEqual(got, before) {
				t.Fatalf("while kandle-0 was down the group changed from %v to %v", before, got)
			}
			if n := other.sessions.Load() - settled; n != 0 {
				t.Fatalf("kandle-1 began %d group sessions after kandle-0 stopped, want 0 (no rebalance)", n)
			}
			down := other.sessions.Load()

			restarted := startMember(t, top, "kandle-0", static)
			defer restarted.run.stop(t)
			waitUntil(t, 30*time.Second, "the restarted instance owns its 2 partitions again", func() bool {
				return owned(restarted) == 2
			})
			// The restarted instance works: its transactional producer
			// fenced the old one's and it commits trades of its partitions.
			for i := range 40 {
				sym := fmt.Sprintf("S%d", i)
				cl.Produce(context.Background(), &kgo.Record{Topic: "trades", Key: []byte(sym),
					Value: fmt.Appendf(nil, `{"symbol":"%s","ts":%d,"price":"1","qty":"1","trade_id":"%d"}`, sym, time.Now().UnixMilli(), i)}, nil)
			}
			if err := cl.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, 30*time.Second, "the restarted instance processes its partitions' trades", func() bool {
				return counter(t, restarted.reg, "kandle_records_total", "accepted") > 0
			})
			stopWatch()
			wg.Wait()
			if got := assignment(t, adm, group, "trades"); !mapsEqual(got, before) {
				t.Errorf("after the restart the assignment is %v, before it was %v", got, before)
			}
			ownedSeen.Range(func(k, _ any) bool {
				if k.(float64) != 2 {
					t.Errorf("kandle-1 owned %v partitions during kandle-0's restart, want always 2", k)
				}
				return true
			})
			// As in Kafka, a static member that rejoins a stable group with
			// the same protocol takes its old place without a rebalance. If
			// it was the group's leader, though, kgo recomputes the plan
			// after the sync and rejoins when its own part differs from the
			// old one it was handed (its KIP-814 handling), which costs one
			// rebalance in which nothing moves (checked above).
			rejoin := other.sessions.Load() - down
			t.Logf("kandle-1 group sessions: %d before kandle-0 stopped, %d while it was down, %d after it rejoined", settled, down, other.sessions.Load())
			if rejoin > 1 {
				t.Errorf("kandle-0's rejoin made kandle-1 begin %d group sessions, want at most 1", rejoin)
			}
		})
	}
}

func mapsEqual(a, b map[string][]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func waitUntil(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
