package kinesis

import (
	"context"
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/kandle/kandle/internal/clock"
)

// A shard split and then a merge while a consumer runs: children are opened
// only after their parents' SHARD_END, and every key's records arrive in
// order across both reshards.
func testSplitAndMerge(t *testing.T, e *env) {
	ctx := context.Background()
	h := &recorder{}
	e.put(t, 10, 0, 200)
	c := e.startConsumer(t, "solo", h)
	eventually(t, 10*time.Second, "first 200", func() bool { n, _ := distinct(payloads(h.snapshot())); return n == 200 })

	shards, err := listShards(ctx, e.kin, e.stream)
	if err != nil || len(shards) != 1 {
		t.Fatalf("list: %d shards, %v", len(shards), err)
	}
	parent := aws.ToString(shards[0].ShardId)
	lo, _ := new(big.Int).SetString(aws.ToString(shards[0].HashKeyRange.StartingHashKey), 10)
	hi, _ := new(big.Int).SetString(aws.ToString(shards[0].HashKeyRange.EndingHashKey), 10)
	mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
	if _, err := e.kin.SplitShard(ctx, &kinesis.SplitShardInput{
		StreamName: &e.stream, ShardToSplit: &parent, NewStartingHashKey: aws.String(mid.String()),
	}); err != nil {
		t.Fatal(err)
	}
	e.waitActive(t)
	e.put(t, 10, 200, 400)
	eventually(t, 15*time.Second, "400 after split", func() bool { n, _ := distinct(payloads(h.snapshot())); return n == 400 })

	shards, err = listShards(ctx, e.kin, e.stream)
	if err != nil {
		t.Fatal(err)
	}
	kids := childrenOf(shards, parent)
	if len(kids) != 2 {
		t.Fatalf("split made %v", kids)
	}
	if _, err := e.kin.MergeShards(ctx, &kinesis.MergeShardsInput{
		StreamName: &e.stream, ShardToMerge: &kids[0], AdjacentShardToMerge: &kids[1],
	}); err != nil {
		t.Fatal(err)
	}
	e.waitActive(t)
	e.put(t, 10, 400, 600)
	eventually(t, 15*time.Second, "600 after merge", func() bool { n, _ := distinct(payloads(h.snapshot())); return n == 600 })
	shards, _ = listShards(ctx, e.kin, e.stream)
	merged := childrenOf(shards, kids[0])
	if len(merged) != 1 {
		t.Fatalf("merge children %v", merged)
	}
	// Once a finished shard's children have started, its lease is deleted,
	// and shard sync does not recreate it although the shard is still listed.
	tbl := &leaseTable{db: e.ddb, name: e.table, duration: time.Second, clock: clock.System{}}
	onlyMerged := func() bool {
		items, err := tbl.scan(ctx)
		return err == nil && len(items) == 1 && items[0].ShardID == merged[0] && items[0].Checkpoint != ShardEnd
	}
	eventually(t, 10*time.Second, "only the merged shard's lease left", onlyMerged)
	time.Sleep(1500 * time.Millisecond) // several shard syncs
	if !onlyMerged() {
		items, _ := tbl.scan(ctx)
		t.Fatalf("finished leases came back: %+v", items)
	}
	c.close(t)

	evs := h.snapshot()
	// One consumer and no stealing: the global delivery order must keep
	// every key in order, without redelivery.
	checkKeyOrder(t, payloads(evs))
	if _, dup := distinct(payloads(evs)); dup != 0 {
		t.Errorf("%d redelivered without any failure", dup)
	}
	pos := func(kind, shard string) int {
		return slices.IndexFunc(evs, func(e event) bool { return e.kind == kind && e.shard == shard })
	}
	for _, step := range []struct {
		parents []string
		child   string
	}{{[]string{parent}, kids[0]}, {[]string{parent}, kids[1]}, {kids, merged[0]}} {
		open := pos("open", step.child)
		if open < 0 {
			t.Fatalf("child %s never opened", step.child)
		}
		for _, p := range step.parents {
			if end := pos("end", p); end < 0 || end > open {
				t.Fatalf("child %s opened (event %d) before parent %s ended (event %d)", step.child, open, p, end)
			}
		}
	}
}
