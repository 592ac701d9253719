package engine_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/topology"
)

// A shutdown before the stages run is as quiet as one after: Run cancelled
// while it creates the topology's topics, or while it waits for brokers
// that cannot be reached yet, returns nil.
func TestRunCancelledBeforeStartIsQuiet(t *testing.T) {
	run := func(t *testing.T, broker string, started <-chan struct{}) {
		t.Helper()
		top, err := topology.Parse("quiet.yaml", fmt.Appendf(nil, `
name: stopearly
brokers: [%s]
metrics: ""
sources:
  trades: {topic: trades, partitions: 1}
processors:
  c1m: {kind: candles, from: trades, timeframe: 1m, output: {topic: s.1m, partitions: 1}}
`, broker), topology.Registry{})
		if err != nil {
			t.Fatal(err)
		}
		eng, err := engine.New(top, engine.WithStateDir(t.TempDir()), engine.WithInstanceID("q"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- eng.Run(ctx) }()
		select {
		case <-started:
		case err := <-done:
			t.Fatalf("Run returned before it was cancelled: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("Run never got to the point the test cancels it at")
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run cancelled before its stages started returned %v, want nil (a graceful shutdown is quiet)", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return within 30s of its cancel")
		}
	}

	t.Run("DuringTopicCreation", func(t *testing.T) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		reached, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		c.ControlKey(int16(kmsg.CreateTopics), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			once.Do(func() { close(reached) })
			<-release // hold topic creation until the test has cancelled Run
			return nil, nil, false
		})
		defer close(release)
		run(t, c.ListenAddrs()[0], reached)
	})

	t.Run("WaitingForBrokers", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens there: the brokers are unreachable
		waiting := make(chan struct{})
		go func() { time.Sleep(time.Second); close(waiting) }() // a few attempts in
		run(t, addr, waiting)
	})
}
