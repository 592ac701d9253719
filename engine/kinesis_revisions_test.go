package engine_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
)

const kinesisRevTopology = `
name: kinrev
brokers: [%s]
metrics: ""
commit_interval: 50ms
sources:
  ticks:
    kind: kinesis
    partitions: 1
    kinesis: {stream: ticks, endpoint: %s, dynamodb_endpoint: %s, lease_duration: 2s, poll_interval: 50ms}
processors:
  # The shipped lateness, idle_timeout and max_future.
  1m: {kind: candles, from: ticks, timeframe: 1m, revise_within: 1h, output: {topic: kr.1m, partitions: 1}}
  5m: {kind: rollup, from: 1m, timeframe: 5m, output: {topic: kr.5m, partitions: 1}}
dead_letter: {topic: kinrev.dlq}
`

// A candles processor reading a Kinesis shard keeps a revision horizon as
// one reading a Kafka partition does: late trades inside it revise the
// closed 1m window (rev 1, then rev 2) and, through the rollup, the closed
// 5m window (rev 1); none is dead-lettered, and a replay of the stream
// writes the same candles, revisions included. The trades are put before
// the stage starts, so it reads them in one go, before its idle advance
// (which later closes the windows up to the wall clock) could move the
// watermark.
func TestKinesisRevisions(t *testing.T) {
	testkit.WallClockTest(t)
	top, _, seeds, client := kinesisSetup(t, "ticks:1", kinesisRevTopology)
	t0 := time.Now().UTC().Truncate(5 * time.Minute).Add(-10 * time.Minute)
	var entries []types.PutRecordsRequestEntry
	trade := func(id int, at time.Duration, price string) {
		v := fmt.Sprintf(`{"symbol":"BTC","ts":%d,"price":"%s","qty":"1","trade_id":%d}`, t0.Add(at).UnixMilli(), price, id)
		entries = append(entries, types.PutRecordsRequestEntry{PartitionKey: aws.String("BTC"), Data: []byte(v)})
	}
	trade(1, 10*time.Second, "100")
	trade(2, 65*time.Second, "101")              // closes 00:00 (rev 0)
	trade(3, 20*time.Second, "105")              // late, inside the horizon
	trade(4, 70*time.Second, "102")              // 00:00 rev 1
	trade(5, 5*time.Minute+5*time.Second, "103") // closes 00:01 to 00:04, and the 5m window 00:00 (rev 0)
	trade(6, 30*time.Second, "90")               // late again: a new low
	trade(7, 5*time.Minute+10*time.Second, "104")
	// One record per call: a shard keeps the order of the calls.
	for _, e := range entries {
		out, err := client.PutRecords(context.Background(), &awskinesis.PutRecordsInput{StreamName: aws.String("ticks"), Records: []types.PutRecordsRequestEntry{e}})
		if err != nil || aws.ToInt32(out.FailedRecordCount) != 0 {
			t.Fatalf("put record: %v", err)
		}
	}

	reg := prometheus.NewRegistry()
	r := (&fixture{t: t, top: top}).start(t.TempDir(), "a", engine.WithRegisterer(reg))
	defer r.stop(t)

	topics := []string{"kr.1m", "kr.5m"}
	var live map[string][]string
	var newest1m, newest5m *candle.Candle
	for deadline := time.Now().Add(90 * time.Second); ; {
		live, newest1m, newest5m = map[string][]string{}, nil, nil
		for _, topic := range topics {
			for _, rec := range testkit.ReadTopic(t, seeds, topic) {
				if engine.IsQuietRecord(rec) {
					continue
				}
				live[topic] = append(live[topic], string(rec.Value))
				c, err := candle.ParseJSON(rec.Value)
				if err != nil {
					t.Fatal(err)
				}
				if c.OpenTime != t0.UnixMilli() {
					continue
				}
				if topic == "kr.1m" && (newest1m == nil || c.Rev > newest1m.Rev) {
					newest1m = &c
				} else if topic == "kr.5m" && (newest5m == nil || c.Rev > newest5m.Rev) {
					newest5m = &c
				}
			}
			sort.Strings(live[topic])
		}
		if newest1m != nil && newest1m.Rev == 2 && newest5m != nil && newest5m.Rev == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed after 90s: %v", live)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if newest1m.Low.String() != "90" || newest1m.High.String() != "105" || newest1m.Trades != 3 {
		t.Errorf("newest 1m 00:00 candle %+v, want rev 2 with low 90, high 105, 3 trades", newest1m)
	}
	if newest5m.Low.String() != "90" || newest5m.High.String() != "105" || newest5m.Trades != 5 {
		t.Errorf("newest 5m 00:00 candle %+v, want rev 1 with low 90, high 105, 5 trades", newest5m)
	}
	if n := counter(t, reg, "kandle_revisions_total", "1m"); n != 2 {
		t.Errorf("kandle_revisions_total{stage=1m} = %v, want 2", n)
	}
	if n := counter(t, reg, "kandle_rejected_total", "late"); n != 0 {
		t.Errorf("kandle_rejected_total{reason=late} = %v, want 0: every late trade is inside the horizon", n)
	}
	if dlq := testkit.ReadTopic(t, seeds, "kinrev.dlq"); len(dlq) != 0 {
		t.Errorf("dead-lettered %d records, want none", len(dlq))
	}

	// The windows the input closes (the idle advance closes later ones in
	// the live run only).
	want := kinesisReplay(t, top, seeds)
	closed := closedByInput(t, want, live)
	for _, topic := range topics {
		sort.Strings(closed[topic])
		if !slices.Equal(closed[topic], want[topic]) {
			t.Errorf("%s: the live run differs from a replay of the stream:\nlive:\n%s\nreplay:\n%s", topic,
				strings.Join(closed[topic], "\n"), strings.Join(want[topic], "\n"))
		}
	}
}
