package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	kkin "github.com/kandle/kandle/connectors/kinesis"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/topology"
)

// A Kinesis shard's idle advance whose transaction fails is reported (log
// and kandle_idle_advance_errors_total) and retried: the shard's state is
// rebuilt from its last commit and the next idle advance closes the window,
// exactly once. (It used to be logged and lost: the processor believed the
// candle emitted.) Shipped defaults.
func TestKinesisIdleAdvanceCommitFailureIsRetried(t *testing.T) {
	testkit.WallClockTest(t)
	kin, ddb := kinesisServices(t, "ticks:1")
	r := newKfakeRig(t, 1)
	path := filepath.Join(t.TempDir(), "kin.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, `
name: kidle
brokers: [%s]
metrics: ""
sources:
  ticks:
    kind: kinesis
    partitions: 1
    kinesis: {stream: ticks, endpoint: %s, dynamodb_endpoint: %s, lease_duration: 2s, poll_interval: 50ms}
processors:
  c1m: {kind: candles, from: ticks, timeframe: 1m, output: {topic: k.1m, partitions: 1}}
`, r.seeds[0], kin.URL(), ddb.URL()), 0o644); err != nil {
		t.Fatal(err)
	}
	top, err := topology.Load(path, topology.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	r.top = top
	idle := top.Processors["c1m"].IdleTimeout

	// Fail the output produce of one transaction of the shard when armed.
	var armed, failed atomic.Int64
	var outID atomic.Pointer[[16]byte] // k.1m's topic id: produce requests name topics by id
	r.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r.c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		hit := false
		id := outID.Load()
		for _, tp := range pr.Topics {
			hit = hit || tp.Topic == "k.1m" || (id != nil && tp.TopicID == *id)
		}
		if !hit || armed.Load() == 0 {
			return nil, nil, false
		}
		armed.Add(-1)
		failed.Add(1)
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		resp.SetVersion(pr.GetVersion())
		for _, tp := range pr.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = tp.Topic, tp.TopicID
			for _, p := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.InvalidRecord.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})

	client, _, err := kkin.NewClients(context.Background(), "us-east-1", kin.URL(), ddb.URL())
	if err != nil {
		t.Fatal(err)
	}
	v := fmt.Appendf(nil, `{"symbol":"BTC","ts":%d,"price":"42","qty":"1","trade_id":1}`, r.minute.Add(time.Second).UnixMilli())
	if _, err := client.PutRecord(context.Background(), &awskinesis.PutRecordInput{StreamName: aws.String("ticks"), PartitionKey: aws.String("BTC"), Data: v}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r.start("a", t.TempDir(), reg)
	r.waitFor("the record to be processed and committed", 60*time.Second, func() bool {
		return counter(t, reg, "kandle_records_total", "accepted") == 1 && counter(t, reg, "kandle_transactions_total", "committed") >= 1
	})

	td, err := r.adm.ListTopics(context.Background(), "k.1m")
	if err != nil {
		t.Fatal(err)
	}
	id := [16]byte(td["k.1m"].ID)
	outID.Store(&id)
	armed.Store(1)
	r.clock.Set(r.minute.Add(2*time.Second + idle + 2*time.Minute))
	r.waitFor("the idle advance's transaction to fail and be reported", 30*time.Second, func() bool {
		return counter(t, reg, "kandle_idle_advance_errors_total", "commit") >= 1
	})
	// The rebuilt shard measures idle_timeout again from its rebuild: the
	// wall clock runs on until the retry closes the window.
	now := r.minute.Add(2*time.Second + idle + 2*time.Minute)
	r.waitFor("the retried idle advance to close the window", 60*time.Second, func() bool {
		now = now.Add(idle)
		r.clock.Set(now)
		return len(r.read("k.1m")) > 0
	})
	time.Sleep(500 * time.Millisecond) // more ticks: still once
	got := r.read("k.1m")
	want := fmt.Sprintf(`"open_time":%d`, r.minute.UnixMilli())
	n := 0
	for _, c := range got {
		if strings.Contains(c, want) {
			n++
			if !strings.Contains(c, `"trades":1`) {
				t.Fatalf("the window closed without its trade: %s", c)
			}
		}
	}
	if n != 1 || failed.Load() != 1 {
		t.Fatalf("want the window closed exactly once after one failed attempt (failed %d), got %v", failed.Load(), got)
	}
}
