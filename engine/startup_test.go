package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/topology"
)

// kfakeFixture is the e2e fixture on a plain kfake cluster, whose faults
// make the broker answer chosen requests with an error.
func kfakeFixture(t *testing.T) (*fixture, *kfake.Cluster) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return fixtureOn(t, c.ListenAddrs()), c
}

// Broker errors while kandle starts (creating its topics, reading and
// recording the state fingerprints) do not end Run: each failed step is
// logged, counted and retried after a backoff, and once the broker answers
// the stages start and produce the candles a replay gives.
func TestStartupRetriesBrokerErrors(t *testing.T) {
	testkit.WallClockTest(t)
	f, c := kfakeFixture(t)
	f.produce(3000, 7, t0, 40*time.Minute)
	want := f.replay()
	topics := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.CreateTopics}, Err: kerr.UnknownServerError, Count: 3})
	fingerprints := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: engine.FingerprintTopic(f.top),
		Err: kerr.UnknownServerError, Count: 3})
	reg := prometheus.NewRegistry()
	r := f.start(t.TempDir(), "a", engine.WithRegisterer(reg))
	defer r.stop(t)
	deadline := time.Now().Add(90 * time.Second)
	for topics.Hits() < 3 || fingerprints.Hits() < 3 {
		select {
		case err := <-r.done:
			t.Fatalf("Run returned on a broker error at start-up: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("start-up did not retry: %d of 3 CreateTopics and %d of 3 ListOffsets faulted", topics.Hits(), fingerprints.Hits())
		}
	}
	f.waitFor(want, 90*time.Second)
	select {
	case err := <-r.done:
		t.Fatalf("Run returned: %v", err)
	default:
	}
	for _, step := range []string{"topics", "fingerprints"} {
		if n := counter(t, reg, "kandle_startup_retries_total", step); n != 3 {
			t.Errorf("kandle_startup_retries_total{step=%q} = %v, want 3", step, n)
		}
	}
}

// What retrying cannot fix still ends Run at once, with the broker's
// answer: here the brokers refuse to create a topic (a policy).
func TestStartupRefusalEndsRun(t *testing.T) {
	testkit.WallClockTest(t)
	f, c := kfakeFixture(t)
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.CreateTopics}, Err: kerr.PolicyViolation, Count: -1})
	eng, err := engine.New(f.top, engine.WithStateDir(t.TempDir()), engine.WithInstanceID("a"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = eng.Run(ctx)
	if !errors.Is(err, kerr.PolicyViolation) || ctx.Err() != nil {
		t.Fatalf("Run: %v (context %v), want the POLICY_VIOLATION answer at once", err, ctx.Err())
	}
	if !strings.Contains(err.Error(), "create topic") {
		t.Errorf("error %q does not say which step failed", err)
	}
}

// kandle started before its broker waits for it, however long, and runs
// once it is up: the candles equal a replay's.
func TestStartupWaitsForTheBroker(t *testing.T) {
	port := testkit.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	top, err := topology.Parse("e2e.yaml", fmt.Appendf(nil, e2eTopology, addr), topology.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, seeds: []string{addr}, top: top}
	reg := prometheus.NewRegistry()
	r := f.start(t.TempDir(), "a", engine.WithRegisterer(reg))
	defer r.stop(t)
	for deadline := time.Now().Add(30 * time.Second); counter(t, reg, "kandle_startup_retries_total", "topics") < 3; time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-r.done:
			t.Fatalf("Run returned while the broker was down: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no start-up retry counted while the broker was down")
		}
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kafka.EnsureTopics(context.Background(), cl, []kafka.TopicSpec{{Name: "trades", Partitions: 3}}); err != nil {
		t.Fatal(err)
	}
	f.produce(3000, 8, t0, 40*time.Minute)
	f.waitFor(f.replay(), 90*time.Second)
}
