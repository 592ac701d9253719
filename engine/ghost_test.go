package engine_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kandle/kandle/internal/testkit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// An instance that loses a partition in a rebalance never emits, commits
// or restores anything for it again, also when the rebalance lands while
// its transaction is failing: the abort rebuilds only the partitions the
// group still gives it. (The ghost restore is visible as a restore barrier
// of the old owner on the partition's changelog after the new owner's, and
// any ghost commit as a committed changelog record of the old owner's
// transactional producer.)
func TestNoGhostPartitionAfterAbortDuringRebalance(t *testing.T) {
	testkit.WallClockTest(t)
	r := newKfakeRig(t, 2)
	var holdProduce atomic.Bool
	var heldProduce atomic.Int64
	release := make(chan struct{})
	txnA := r.group + ".a"
	r.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r.c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		if !holdProduce.Load() || pr.TransactionID == nil || *pr.TransactionID != txnA {
			return nil, nil, false
		}
		heldProduce.Add(1)
		r.c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	regA := prometheus.NewRegistry()
	r.start("a", t.TempDir(), regA)
	r.trade(0, 1, time.Second)
	r.trade(1, 2, time.Second)
	r.waitFor("a to commit both partitions", 30*time.Second, func() bool { return r.committed(0) == 1 && r.committed(1) == 1 })

	// a's next transaction hangs in its produce...
	holdProduce.Store(true)
	r.trade(0, 3, 2*time.Second)
	r.trade(1, 4, 2*time.Second)
	r.waitFor("a's transactional produce to be held", 30*time.Second, func() bool { return heldProduce.Load() > 0 })
	// ...while b joins and the group moves one partition to b.
	r.start("b", t.TempDir(), prometheus.NewRegistry())
	var moved int32 = -1
	r.waitFor("the group to give b a partition", 60*time.Second, func() bool {
		dg, err := r.adm.DescribeGroups(context.Background(), r.group)
		if err != nil {
			return false
		}
		for _, m := range dg[r.group].Members {
			ca, ok := m.Assigned.AsConsumer()
			if !ok || !strings.HasPrefix(m.ClientID, "kandle-b") {
				continue
			}
			for _, tp := range ca.Topics {
				if tp.Topic == "trades" && len(tp.Partitions) > 0 {
					moved = tp.Partitions[0]
					return true
				}
			}
		}
		return false
	})
	holdProduce.Store(false)
	close(release)
	r.waitFor("a's transaction to abort", 30*time.Second, func() bool {
		return counter(t, regA, "kandle_transactions_total", "aborted") >= 1
	})
	kept := 1 - moved
	r.waitFor("both trades to be committed by their owners", 60*time.Second, func() bool {
		return r.committed(0) == 2 && r.committed(1) == 2
	})
	// a keeps working on the partition it kept (it went through the rebuild).
	r.trade(kept, 5, 3*time.Second)
	r.waitFor("a to commit its partition again", 30*time.Second, func() bool { return r.committed(kept) == 3 })

	// The moved partition's changelog: a's transactional producer id from
	// before the move, then b's barrier; after it, nothing of a.
	changelog := r.top.Name + ".c1m.changelog"
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.seeds...), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{changelog: {moved: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := r.adm.ListEndOffsets(context.Background(), changelog)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(changelog, moved)
	var recs []*kgo.Record
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(recs) == 0 || recs[len(recs)-1].Offset+1 < end.Offset {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading changelog partition %d: %v", moved, ctx.Err())
		}
		recs = append(recs, fs.Records()...)
	}
	pidA, bBarrier := int64(-1), -1
	for i, rec := range recs {
		switch {
		case string(rec.Key) == "b" && string(rec.Value) == "b" && bBarrier < 0:
			bBarrier = i
		case string(rec.Key) == "o" && bBarrier < 0:
			pidA = rec.ProducerID // a committed progress for this partition before the move
		}
	}
	if pidA < 0 || bBarrier < 0 {
		t.Fatalf("changelog partition %d: want a's progress records, then b's restore barrier; got %d records (a's producer %d, b's barrier at %d)", moved, len(recs), pidA, bBarrier)
	}
	for _, rec := range recs[bBarrier+1:] {
		if rec.Attrs.IsControl() {
			continue // a's abort marker: what it wrote there is invisible
		}
		if string(rec.Key) == "b" && string(rec.Value) == "a" {
			t.Fatalf("a restored partition %d again after losing it (its restore barrier at offset %d)", moved, rec.Offset)
		}
		if rec.ProducerID == pidA {
			t.Fatalf("a produced to the changelog of partition %d after losing it: offset %d key %q", moved, rec.Offset, rec.Key)
		}
	}
}
