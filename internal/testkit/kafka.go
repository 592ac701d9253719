package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadTopic returns every committed record of topic (read_committed, as a
// downstream reader sees it), reading up to the end offsets at call time.
// opts add to the client's options (TLS and SASL for a secured broker).
func ReadTopic(t testing.TB, seeds []string, topic string, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	left := map[int32]int64{}
	offsets := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
			offsets[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(left) == 0 {
		return nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets})
	var out []*kgo.Record
	idle := time.Now()
	for len(left) > 0 {
		pctx, c := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		c()
		if ctx.Err() != nil {
			t.Fatalf("reading %s: timed out with partitions %v unfinished", topic, left)
		}
		got := false
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			got = true
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
			if r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
		if got {
			idle = time.Now()
		} else if time.Since(idle) > 3*time.Second {
			break // only an aborted tail can be left
		}
	}
	return out
}
