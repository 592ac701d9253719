package engine_test

import (
	"context"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/kafka"
	kkin "github.com/kandle/kandle/connectors/kinesis"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/gen"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

const kinesisTopology = `
name: kin
brokers: [%s]
metrics: ""
commit_interval: 50ms
sources:
  ticks:
    kind: kinesis
    partitions: 2
    kinesis: {stream: ticks, endpoint: %s, dynamodb_endpoint: %s, lease_duration: 2s, poll_interval: 50ms%s}
processors:
  # Not yet the shipped defaults: the input is stamped in March 2026 and put
  # in three batches seconds apart; a caught-up shard idle for idle_timeout
  # between batches advances to the wall clock and the next batch is late.
  # Needs input put in real time (or all before the first catch-up).
  c1m: {kind: candles, from: ticks, timeframe: 1m, lateness: 2s, idle_timeout: 0s, max_future: 0s, output: {topic: k.1m, partitions: 2}}
  c5m: {kind: rollup, from: c1m, timeframe: 5m, output: {topic: k.5m, partitions: 1}}
dead_letter: {topic: kin.dlq}
`

// Two instances share a 4-shard stream through DynamoDB leases; one (its own
// process) is SIGKILLed mid-stream and its shards move; a shard is split
// mid-stream. The candles equal one uninterrupted replay of the stream,
// whether the instances poll the shards or read them with enhanced fan-out
// (replay always polls).
func TestKinesisSharedKilledAndResharded(t *testing.T) {
	t.Run("Polling", func(t *testing.T) { testKinesisSharedKilledAndResharded(t, "") })
	t.Run("FanOut", func(t *testing.T) { testKinesisSharedKilledAndResharded(t, ", enhanced_fan_out: kandle-kin") })
}

// testKinesisSharedKilledAndResharded runs the scenario with extra settings
// appended to the source's kinesis mapping.
func testKinesisSharedKilledAndResharded(t *testing.T, kinesisExtra string) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_REGION", "us-east-1")
	kin := testkit.KinesisMock(t, "ticks:4")
	ddb := testkit.Dynalite(t)
	b, err := kafka.StartDevBroker(kafka.WithListen("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	path := filepath.Join(t.TempDir(), "kin.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, kinesisTopology, b.Addrs()[0], kin.URL(), ddb.URL(), kinesisExtra), 0o644); err != nil {
		t.Fatal(err)
	}
	top, err := topology.Load(path, topology.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	client, _, err := kkin.NewClients(ctx, "us-east-1", kin.URL(), ddb.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg := gen.DefaultConfig()
	cfg.Symbols = []string{"BTC", "ETH", "SOL", "ADA", "DOT", "XRP", "BNB", "AVAX", "LINK", "ATOM"}
	cfg.Count, cfg.Span, cfg.Start, cfg.Disorder = 9000, 90*time.Minute, t0, time.Second
	cfg.DupRate, cfg.MalformedRate = 0.02, 0.01
	g, err := gen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var sent, sentKeys [][]byte // every record and its partition key, in put order (per key, the order Kinesis keeps)
	put := func(n int) {
		t.Helper()
		var batch []types.PutRecordsRequestEntry
		flush := func() {
			if len(batch) == 0 {
				return
			}
			out, err := client.PutRecords(ctx, &awskinesis.PutRecordsInput{StreamName: aws.String("ticks"), Records: batch})
			if err != nil || aws.ToInt32(out.FailedRecordCount) != 0 {
				t.Fatalf("put records: %v (failed %d)", err, aws.ToInt32(out.FailedRecordCount))
			}
			batch = batch[:0]
		}
		for range n {
			key, value, ok := g.Next()
			if !ok {
				break
			}
			batch = append(batch, types.PutRecordsRequestEntry{PartitionKey: aws.String(string(key)), Data: value})
			sent, sentKeys = append(sent, value), append(sentKeys, key)
			if len(batch) == 250 {
				flush()
			}
		}
		flush()
	}

	put(3000)
	a := startEngine(t, top, t.TempDir(), "a")
	defer a.stop(t)
	child := exec.Command(os.Args[0], "-test.run", "^$")
	child.Env = append(os.Environ(), "KANDLE_TEST_TOPOLOGY="+path, "KANDLE_TEST_INSTANCE=b", "KANDLE_TEST_STATE="+t.TempDir())
	var childLog strings.Builder
	child.Stdout, child.Stderr = &childLog, &childLog
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	time.Sleep(4 * time.Second) // both instances hold leases and work
	put(3000)
	time.Sleep(2 * time.Second)
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	t.Log("instance b killed")

	// Split the first shard at the middle of its hash range.
	shards, err := client.ListShards(ctx, &awskinesis.ListShardsInput{StreamName: aws.String("ticks")})
	if err != nil {
		t.Fatal(err)
	}
	sh := shards.Shards[0]
	lo, _ := new(big.Int).SetString(*sh.HashKeyRange.StartingHashKey, 10)
	hi, _ := new(big.Int).SetString(*sh.HashKeyRange.EndingHashKey, 10)
	mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
	if _, err := client.SplitShard(ctx, &awskinesis.SplitShardInput{StreamName: aws.String("ticks"),
		ShardToSplit: sh.ShardId, NewStartingHashKey: aws.String(mid.String())}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		d, err := client.DescribeStreamSummary(ctx, &awskinesis.DescribeStreamSummaryInput{StreamName: aws.String("ticks")})
		if err == nil && d.StreamDescriptionSummary.StreamStatus == types.StreamStatusActive {
			break
		}
		if i > 200 {
			t.Fatal("stream not active after split")
		}
		time.Sleep(50 * time.Millisecond)
	}
	put(3000)

	var want map[string][]string
	topics := []string{"k.1m", "k.5m"}
	deadline := time.Now().Add(90 * time.Second)
	for {
		want = kinesisReplay(t, top, b.Addrs())
		got := map[string][]string{}
		for _, topic := range topics {
			for _, r := range testkit.ReadTopic(t, b.Addrs(), topic) {
				got[topic] = append(got[topic], string(r.Value))
			}
			sort.Strings(got[topic])
		}
		diff := diffTopics(topics, want, got)
		if diff == "" && len(want["k.1m"]) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("live Kinesis candles differ from replay:\n%s\ninstance b log:\n%s", diff, tail(childLog.String(), 3000))
		}
		time.Sleep(time.Second)
	}
	if len(want["k.1m"]) < 10*80 {
		t.Fatalf("only %d 1m candles", len(want["k.1m"]))
	}
	checkKinesisOffsets(t, top, b.Addrs(), *sh.ShardId)
	// An oracle that shares no resharding code: every record in put order
	// through one partition. No trade is late (disorder < lateness), so up to
	// the point every shard's watermark has passed, the candles are the same.
	p, err := engine.NewPipeline(top, processors.FixedClock{T: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	oracle := map[string][]string{}
	cutoff := t0.Add(80 * time.Minute).UnixMilli()
	p.OnCandle = func(_, topic string, c *candle.Candle, _ int32) {
		if c.CloseTime <= cutoff {
			oracle[topic] = append(oracle[topic], string(c.AppendJSON(nil)))
		}
	}
	for i, v := range sent {
		if err := p.Feed("ticks", 0, int64(i), sentKeys[i], v); err != nil {
			t.Fatal(err)
		}
	}
	before := map[string][]string{}
	for topic, cs := range want {
		for _, js := range cs {
			if c, _ := candle.ParseJSON([]byte(js)); c.CloseTime <= cutoff {
				before[topic] = append(before[topic], js)
			}
		}
		sort.Strings(oracle[topic])
	}
	if diff := diffTopics(topics, oracle, before); diff != "" || len(oracle["k.5m"]) < 10*15 {
		t.Fatalf("Kinesis candles differ from a single-partition run of the same records (%d 5m candles):\n%s", len(oracle["k.5m"]), diff)
	}
}

// checkKinesisOffsets checks what `kandle offsets` reports for the stream
// after the split of shard split, with instance b dead: the split shard
// finished (or its lease already deleted, its children having started), its
// two children naming it, every open shard held by instance a.
func checkKinesisOffsets(t *testing.T, top *topology.Topology, seeds []string, split string) {
	t.Helper()
	all, err := engine.Offsets(context.Background(), top, seeds)
	if err != nil {
		t.Fatalf("offsets: %v", err)
	}
	var leases []kkin.LeaseInfo
	for _, g := range all {
		if g.Name == "c1m" {
			leases = g.Shards
		}
	}
	children := 0
	for _, l := range leases {
		switch {
		case l.Shard == split && l.Checkpoint != kkin.ShardEnd:
			t.Errorf("offsets: split shard %s has checkpoint %q, want %s", l.Shard, l.Checkpoint, kkin.ShardEnd)
		case l.Shard != split && l.Checkpoint != kkin.ShardEnd && !strings.HasPrefix(l.Owner, "a-"):
			t.Errorf("offsets: open shard %s is held by %q, want instance a", l.Shard, l.Owner)
		}
		if len(l.Parents) == 1 && l.Parents[0] == split {
			children++
		}
	}
	if len(leases) < 5 || len(leases) > 6 || children != 2 {
		t.Fatalf("offsets: want 5 open leases (and maybe the finished %s), 2 of them its children; got %+v", split, leases)
	}
}

func kinesisReplay(t *testing.T, top *topology.Topology, seeds []string) map[string][]string {
	t.Helper()
	var rec recordingOutput
	if _, err := engine.Replay(context.Background(), top, seeds, engine.ReplayOptions{
		Started: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Out: &rec}); err != nil {
		t.Fatal(err)
	}
	for k := range rec.byTopic {
		sort.Strings(rec.byTopic[k])
	}
	return rec.byTopic
}

func startEngine(t *testing.T, top *topology.Topology, dir, instance string) *running {
	f := &fixture{t: t, top: top}
	return f.start(dir, instance)
}

func diffTopics(topics []string, want, got map[string][]string) string {
	saved := outputTopics
	defer func() { outputTopics = saved }()
	outputTopics = topics
	return diffOutputs(want, got)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
