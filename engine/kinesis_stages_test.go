package engine_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
)

const kinesisTwoStages = `
name: kin2
brokers: [%s]
metrics: ""
commit_interval: 50ms
sources:
  ticks:
    kind: kinesis
    partitions: 2
    kinesis: {stream: ticks, endpoint: %s, dynamodb_endpoint: %s, lease_duration: 2s, poll_interval: 50ms}
processors:
  c1s: {kind: candles, from: ticks, timeframe: 1s, output: {topic: k2.1s, partitions: 2}}
  c2s: {kind: candles, from: ticks, timeframe: 2s, output: {topic: k2.2s, partitions: 2}}
dead_letter: {topic: kin2.dlq}
`

// Two candle processors read one Kinesis stream, run by two instances that
// share one lease table: leases are per (stage, shard), so each stage reads
// every shard and both make all their candles, equal to a replay of the
// stream.
func TestKinesisTwoStagesOneStream(t *testing.T) {
	testkit.WallClockTest(t)
	top, _, seeds, client := kinesisSetup(t, "ticks:2", kinesisTwoStages)
	prod := startKinesisProducer(t, client, "ticks", 200, 0)
	defer prod.stop()
	for _, name := range []string{"a", "b"} {
		r := startEngine(t, top, t.TempDir(), name)
		defer r.stop(t)
	}
	time.Sleep(8 * time.Second) // the input's length
	sent, _, _ := prod.stop()
	t.Logf("put %d records in real time", len(sent))

	topics := []string{"k2.1s", "k2.2s"}
	var want, got map[string][]string
	for deadline := time.Now().Add(90 * time.Second); ; {
		want = kinesisReplay(t, top, seeds)
		got = map[string][]string{}
		for _, topic := range topics {
			for _, r := range testkit.ReadTopic(t, seeds, topic) {
				got[topic] = append(got[topic], string(r.Value))
			}
			sort.Strings(got[topic])
		}
		diff := diffTopics(topics, want, closedByInput(t, want, got))
		if diff == "" && len(want["k2.2s"]) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("live candles of the two stages differ from replay:\n%s", diff)
		}
		time.Sleep(time.Second)
	}
	// Both stages made candles of every symbol, from every shard.
	for _, topic := range topics {
		syms := map[string]bool{}
		for _, js := range want[topic] {
			c, err := candle.ParseJSON([]byte(js))
			if err != nil {
				t.Fatal(err)
			}
			syms[c.Symbol] = true
		}
		if len(syms) != 10 {
			t.Errorf("%s: candles of %d symbols, want 10", topic, len(syms))
		}
	}
	// Each stage's leases: every shard, in its own namespace of the table.
	all, err := engine.Offsets(context.Background(), top, seeds)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range all {
		if len(g.Shards) != 2 {
			t.Errorf("stage %s holds leases %+v, want both shards", g.Name, g.Shards)
		}
	}
}
