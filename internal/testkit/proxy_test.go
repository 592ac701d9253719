package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The Kafka proxy keeps a client's every connection on itself, holds
// responses while stalled and traffic while blackholed, and a killed proxy
// cuts the client off.
func TestKafkaProxyFaults(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := StartKafkaProxy(t, c.ListenAddrs()[0])
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.Addr()), kgo.RecordRetries(0), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce := func(within time.Duration) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		start := time.Now()
		err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("x")}).FirstErr()
		return time.Since(start), err
	}
	if _, err := produce(10 * time.Second); err != nil {
		t.Fatalf("produce through the proxy: %v", err)
	}
	p.Stall(time.Second)
	if d, err := produce(10 * time.Second); err != nil || d < 900*time.Millisecond {
		t.Fatalf("stalled produce took %s (err %v), want about 1s", d, err)
	}
	p.Blackhole(time.Second)
	if d, err := produce(10 * time.Second); err != nil || d < 900*time.Millisecond {
		t.Fatalf("blackholed produce took %s (err %v), want about 1s", d, err)
	}
	p.Cut()
	if _, err := produce(10 * time.Second); err != nil {
		t.Fatalf("produce after a cut (the client reconnects): %v", err)
	}
	p.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err == nil {
		t.Fatal("a request succeeded through a killed proxy: the client bypasses it")
	}
}
