package engine_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
)

const kinesisSnapshotTopology = `
name: ksnap
brokers: [%s]
metrics: ""
commit_interval: 50ms
sources:
  ticks:
    kind: kinesis
    partitions: 1
    kinesis: {stream: ticks, endpoint: %s, dynamodb_endpoint: %s, lease_duration: 2s, poll_interval: 50ms}
processors:
  c1s: {kind: candles, from: ticks, timeframe: 1s, output: {topic: ks.1s, partitions: 1}}
dead_letter: {topic: ksnap.dlq}
`

// A Kinesis shard snapshots its state into the changelog like a Kafka
// partition, and its lease checkpoint records where the last snapshot
// starts: a new owner with an empty disk reads the changelog from there,
// not from its start, so its takeover does not grow with history. The
// candles stay equal to a replay across the takeover.
func TestKinesisEmptyDiskRestoreReadsFromTheSnapshot(t *testing.T) {
	testkit.WallClockTest(t)
	top, _, seeds, client := kinesisSetup(t, "ticks:1", kinesisSnapshotTopology)
	// Rounds of one trade of each of 600 keys, stamped with the wall
	// clock: every round changes every key's state, so the changelog
	// outgrows the state (the snapshot threshold) within a few rounds.
	const keys = 600
	round := 0
	put := func(rounds int, pause time.Duration) {
		t.Helper()
		for range rounds {
			now := time.Now().UnixMilli()
			for lo := 0; lo < keys; lo += 500 {
				var batch []types.PutRecordsRequestEntry
				for k := lo; k < min(lo+500, keys); k++ {
					sym := fmt.Sprintf("K%03d", k)
					batch = append(batch, types.PutRecordsRequestEntry{PartitionKey: aws.String(sym),
						Data: fmt.Appendf(nil, `{"symbol":%q,"ts":%d,"price":"%d","qty":"1","trade_id":%d}`, sym, now, 1+round%7, round)})
				}
				out, err := client.PutRecords(context.Background(), &awskinesis.PutRecordsInput{StreamName: aws.String("ticks"), Records: batch})
				if err != nil || aws.ToInt32(out.FailedRecordCount) != 0 {
					t.Fatalf("put records: %v (failed %d)", err, aws.ToInt32(out.FailedRecordCount))
				}
			}
			round++
			time.Sleep(pause)
		}
	}
	f := &fixture{t: t, top: top}
	regA := prometheus.NewRegistry()
	a := f.start(t.TempDir(), "a", engine.WithRegisterer(regA))
	for deadline := time.Now().Add(120 * time.Second); counter(t, regA, "kandle_changelog_snapshots_total", "") < 3; {
		if time.Now().After(deadline) {
			t.Fatal("the shard made fewer than 3 snapshots within 120s")
		}
		put(1, 300*time.Millisecond)
	}
	put(3, 300*time.Millisecond) // a tail after the snapshot, and a checkpoint that records it
	a.stop(t)                    // releases the lease

	changelog := len(testkit.ReadTopic(t, seeds, "ksnap.c1s.changelog"))
	regB := prometheus.NewRegistry()
	b := f.start(t.TempDir(), "b", engine.WithRegisterer(regB)) // a new machine: empty disk
	defer b.stop(t)
	for deadline := time.Now().Add(60 * time.Second); counter(t, regB, "kandle_restored_changelog_records_total", "") == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the new owner restored nothing within 60s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	restored := counter(t, regB, "kandle_restored_changelog_records_total", "")
	t.Logf("the changelog held %d records at the takeover; the new owner read %v", changelog, restored)
	// From the snapshot the last checkpoint names: the state and the
	// changes since, at most about two snapshot intervals (a checkpoint
	// lost at the stop names the snapshot before the last), whatever the
	// history; never the history before the first snapshots.
	if restored > float64(changelog-2000) {
		t.Fatalf("the new owner read %v of the changelog's %d records: not from a recent snapshot", restored, changelog)
	}
	put(3, 300*time.Millisecond) // the new owner works on

	topics := []string{"ks.1s"}
	deadline := time.Now().Add(60 * time.Second)
	for {
		want := kinesisReplay(t, top, seeds)
		got := map[string][]string{}
		for _, r := range testkit.ReadTopic(t, seeds, "ks.1s") {
			if !engine.IsQuietRecord(r) {
				got["ks.1s"] = append(got["ks.1s"], string(r.Value))
			}
		}
		sort.Strings(got["ks.1s"])
		diff := diffTopics(topics, want, closedByInput(t, want, got))
		if diff == "" && len(want["ks.1s"]) >= keys {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("live Kinesis candles differ from replay:\n%s", diff)
		}
		time.Sleep(time.Second)
	}
}
