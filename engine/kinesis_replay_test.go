package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kandle/kandle/candle"
	kkin "github.com/kandle/kandle/connectors/kinesis"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/gen"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

const kinesisReplayTopology = `
name: kinrange
brokers: embedded
metrics: ""
sources:
  ticks:
    kind: kinesis
    kinesis: {stream: %s, endpoint: %s}
processors:
  c1m: {kind: candles, from: ticks, timeframe: 1m, lateness: 2s, output: {topic: k.1m}}
  c5m: {kind: rollup, from: c1m, timeframe: 5m, output: {topic: k.5m}}
dead_letter: {topic: kinrange.dlq}
`

// A Kinesis replay with --to TIME stops every shard at its first record that
// arrived at or after TIME. The oracle is a second stream with the same shard
// layout that only ever received the records put before TIME: a full replay
// of it must give the same candles and dead letters.
func TestKinesisReplayToTime(t *testing.T) {
	testkit.WallClockTest(t)
	kin, client := kinesisMockClient(t, "ticks:2,before:2")
	ctx := context.Background()
	load := func(stream string) *topology.Topology {
		return loadTopologyText(t, fmt.Sprintf(kinesisReplayTopology, stream, kin.URL()))
	}
	cfg := gen.DefaultConfig()
	cfg.Symbols = []string{"BTC", "ETH", "SOL", "ADA", "DOT"}
	cfg.Count, cfg.Span, cfg.Start, cfg.Disorder = 2000, 40*time.Minute, t0, time.Second
	cfg.DupRate, cfg.MalformedRate = 0.02, 0.01
	g, err := gen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	put := func(n int, streams ...string) {
		t.Helper()
		var batch []types.PutRecordsRequestEntry
		for range n {
			key, value, ok := g.Next()
			if !ok {
				break
			}
			batch = append(batch, types.PutRecordsRequestEntry{PartitionKey: aws.String(string(key)), Data: value})
		}
		for len(batch) > 0 {
			chunk := batch[:min(len(batch), 250)]
			batch = batch[len(chunk):]
			for _, s := range streams {
				out, err := client.PutRecords(ctx, &awskinesis.PutRecordsInput{StreamName: aws.String(s), Records: chunk})
				if err != nil || aws.ToInt32(out.FailedRecordCount) != 0 {
					t.Fatalf("put records to %s: %v (failed %d)", s, err, aws.ToInt32(out.FailedRecordCount))
				}
			}
		}
	}
	put(1000, "ticks", "before")
	time.Sleep(1100 * time.Millisecond) // arrival times are the emulator's wall clock
	cut := time.Now()
	time.Sleep(1100 * time.Millisecond)
	put(1000, "ticks")

	replay := func(top *topology.Topology, to engine.Bound) (int64, map[string][]string) {
		var rec recordingOutput
		n, err := engine.Replay(ctx, top, nil, engine.ReplayOptions{
			Started: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), To: to, Out: &rec})
		if err != nil {
			t.Fatal(err)
		}
		for k := range rec.byTopic {
			sort.Strings(rec.byTopic[k])
		}
		return n.Records, rec.byTopic
	}
	nAll, all := replay(load("ticks"), engine.Bound{})
	nCut, got := replay(load("ticks"), engine.Bound{Kind: engine.BoundTime, Time: cut})
	nWant, want := replay(load("before"), engine.Bound{})
	if nAll != 2000 || nCut != 1000 || nWant != 1000 {
		t.Fatalf("records read: whole stream %d (want 2000), up to the cut %d (want 1000), oracle %d (want 1000)", nAll, nCut, nWant)
	}
	topics := []string{"k.1m", "k.5m", "kinrange.dlq"}
	if diff := diffTopics(topics, want, got); diff != "" || len(want["k.1m"]) < 20 {
		t.Fatalf("replay --to TIME differs from a full replay of the records before TIME (%d 1m candles):\n%s", len(want["k.1m"]), diff)
	}
	if diff := diffTopics(topics, all, got); diff == "" {
		t.Fatal("replay --to TIME equals the whole stream's replay: the cut did nothing")
	}
	if _, err := engine.Replay(ctx, load("ticks"), nil, engine.ReplayOptions{To: engine.Bound{Kind: engine.BoundOffset, Offset: 5}, Out: &recordingOutput{}}); err == nil {
		t.Fatal("replay --to OFFSET of a Kinesis source: want an error (sequence numbers differ per shard)")
	}
}

const kinesisReshardReplayTopology = `
name: kinhand
brokers: embedded
metrics: ""
sources:
  readings:
    kind: kinesis
    kinesis: {stream: dev, endpoint: %[1]s}
    fields: {key: device, time: ts, values: [temperature, humidity], qty: "", id: ""}
  temps:
    kind: kinesis
    kinesis: {stream: dev, endpoint: %[1]s}
    fields: {key: device, time: ts, price: temperature, qty: "", id: ""}
processors:
  m10s: {kind: candles, from: readings, timeframe: 10s, output: {topic: kh.m10s}}
  t10s: {kind: candles, from: temps, timeframe: 10s, output: {topic: kh.t10s}}
dead_letter: {topic: kinhand.dlq}
`

// A child shard passes on the keys it was handed and never touched: the
// devices of a shard that is split report only before the split, so their
// 10s windows stay open, untouched, in the children (whose other devices
// move the watermark only part of the way) until the children are merged;
// the merged shard closes them. A replay equals every reading in put order
// through one partition, for single-value and multi-metric candles, gap
// candles included. Event times are set, not the clock's: the result is
// the same on every run.
func TestKinesisReplayHandsOverUntouchedKeys(t *testing.T) {
	testkit.WallClockTest(t)
	kin, client := kinesisMockClient(t, "dev:1")
	ctx := context.Background()
	top := loadTopologyText(t, fmt.Sprintf(kinesisReshardReplayTopology, kin.URL()))
	const devices, quiet = 24, 12 // dev-000…dev-011 report before the split only
	base := time.Now().Truncate(10 * time.Second).Add(-time.Minute).UnixMilli()
	var sent [][2][]byte
	put := func(from, to int, secs ...int64) {
		t.Helper()
		var batch []types.PutRecordsRequestEntry
		for _, s := range secs {
			for d := from; d < to; d++ {
				dev := fmt.Sprintf("dev-%03d", d)
				v := fmt.Appendf(nil, `{"device":%q,"ts":%d,"temperature":"2%d.%d","humidity":%d}`, dev, base+s*1000+int64(d), d%10, s%10, 40+d%7)
				batch = append(batch, types.PutRecordsRequestEntry{PartitionKey: aws.String(dev), Data: v})
				sent = append(sent, [2][]byte{[]byte(dev), v})
			}
		}
		out, err := client.PutRecords(ctx, &awskinesis.PutRecordsInput{StreamName: aws.String("dev"), Records: batch})
		if err != nil || aws.ToInt32(out.FailedRecordCount) != 0 {
			t.Fatalf("put records: %v (failed %d)", err, aws.ToInt32(out.FailedRecordCount))
		}
	}
	put(0, devices, 1, 2, 3)
	kids := splitShard(t, client, "dev", listKinesisShards(t, client, "dev")[0])
	put(quiet, devices, 4, 5, 6) // the children's watermarks stay below the quiet devices' window close
	if _, err := client.MergeShards(ctx, &awskinesis.MergeShardsInput{StreamName: aws.String("dev"),
		ShardToMerge: &kids[0], AdjacentShardToMerge: &kids[1]}); err != nil {
		t.Fatal(err)
	}
	waitStreamActive(t, client, "dev")
	put(quiet, devices, 11, 15, 21, 25, 31, 35)

	var rec recordingOutput
	if _, err := engine.Replay(ctx, top, nil, engine.ReplayOptions{Started: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Out: &rec}); err != nil {
		t.Fatal(err)
	}
	p, err := engine.NewPipeline(top, processors.FixedClock{T: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	cutoff := base + 30_000 // every shard's watermark passed it (last readings at 35s, lateness 2s)
	oracle := map[string][]string{}
	p.OnCandle = func(_, topic string, c *candle.Candle, _ int32) {
		if c.CloseTime <= cutoff {
			oracle[topic] = append(oracle[topic], string(c.AppendJSON(nil)))
		}
	}
	for i, r := range sent {
		for _, src := range []string{"readings", "temps"} {
			if err := p.Feed(src, 0, int64(i), r[0], r[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := map[string][]string{}
	topics := []string{"kh.m10s", "kh.t10s"}
	for _, topic := range topics {
		for _, js := range rec.byTopic[topic] {
			if c, _ := candle.ParseJSON([]byte(js)); c.CloseTime <= cutoff {
				got[topic] = append(got[topic], js)
			}
		}
		sort.Strings(got[topic])
		sort.Strings(oracle[topic])
	}
	// Every series has its first window (the quiet devices' too), both metrics of each device.
	if diff := diffTopics(topics, oracle, got); diff != "" || len(oracle["kh.t10s"]) < devices || len(oracle["kh.m10s"]) < 2*devices {
		t.Fatalf("replay across a split and a merge differs from one partition (%d 10s candles, %d multi-metric):\n%s",
			len(oracle["kh.t10s"]), len(oracle["kh.m10s"]), diff)
	}
}

// kinesisMockClient starts the Kinesis emulator with streams
// ("name:shards,…") and returns it with a client.
func kinesisMockClient(t *testing.T, streams string) (*testkit.Service, *awskinesis.Client) {
	t.Helper()
	kin := testkit.KinesisMock(t, streams)
	client, _, err := kkin.NewClients(context.Background(), "us-east-1", kin.URL(), "")
	if err != nil {
		t.Fatal(err)
	}
	return kin, client
}

// loadTopologyText writes text to a topology file and loads it.
func loadTopologyText(t *testing.T, text string) *topology.Topology {
	t.Helper()
	path := filepath.Join(t.TempDir(), "topology.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	top, err := topology.Load(path, topology.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	return top
}
