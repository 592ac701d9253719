package engine

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/connectors/kinesis"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/state"
	"github.com/kandle/kandle/topology"
)

// The two children of a split open together on one instance and both read
// their parent's committed state (handoff), each up to a restore barrier of
// its own, writing it to the parent's Pebble range. The reads of one shard
// take turns: the parent's Pebble position is the later barrier's, never
// moved back to the earlier one by a read that finished last.
func TestKinesisConcurrentParentReadsKeepPebbleAhead(t *testing.T) {
	k, store := testShardStage(t)
	e := k.e
	const parent = "shardId-000000000000"
	u := k.unit(parent)
	ctx := context.Background()
	producer := func(id string) *kgo.Client { return testShardProducer(t, k, id) }
	// The parent's final commit: one entry and its progress.
	p := producer("kin.c1s." + parent)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	var slab outSlab
	rs := p.ProduceSync(ctx, &kgo.Record{Key: u.keys.entry(&slab, []byte("kBTC")), Value: []byte("state")},
		&kgo.Record{Key: u.keys.progress(), Value: unitProgress{next: 7, seq: "49"}.encode()})
	if err := rs.FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	kids := []*kgo.Client{producer("kin.c1s.shardId-000000000001"), producer("kin.c1s.shardId-000000000002")}
	for round := range 30 {
		var wg sync.WaitGroup
		errs := make([]error, len(kids))
		entries := make([]map[string][]byte, len(kids))
		for i, cl := range kids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				entries[i], _, _, errs[i] = k.loadShard(ctx, cl, parent)
			}()
		}
		wg.Wait()
		for i := range kids {
			if errs[i] != nil || string(entries[i]["kBTC"]) != "state" {
				t.Fatalf("round %d: child %d read the parent: %v, entries %q", round, i, errs[i], entries[i])
			}
		}
		// The last barrier on the changelog: Pebble must stand right after it.
		ends, err := kadm.NewClient(kids[0]).ListEndOffsets(ctx, k.changelog)
		if err != nil {
			t.Fatal(err)
		}
		end, _ := ends.Lookup(k.changelog, 0)
		rc, err := kgo.NewClient(e.kafkaOpts(kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{k.changelog: {0: kgo.NewOffset().At(0)}}))...)
		if err != nil {
			t.Fatal(err)
		}
		last := int64(-1)
		err = readChangelogTo(ctx, rc, k.log, k.changelog, 0, end.Offset-1, func(r *kgo.Record) error {
			if string(r.Key) == string(keyBarrier) {
				last = r.Offset
			}
			return nil
		})
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		meta, ok, err := store.Load(u.ns, u.part, nil)
		if err != nil || !ok || meta.ChangelogOffset != last+1 {
			t.Fatalf("round %d: the parent's Pebble position is %d (found %v, %v), want %d: after the last barrier", round, meta.ChangelogOffset, ok, err, last+1)
		}
	}
}

// testShardStage returns a Kinesis stage of one candle processor ("c1s")
// over a 1-partition changelog on an in-process broker, with its Pebble
// store, ready to restore and commit shards (no Kinesis service: leases,
// reads and shard listings are not used).
func testShardStage(t *testing.T) (*kinesisStage, *state.Store) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "kin-changelog"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	store, err := state.Open(t.TempDir(), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	e := &Engine{store: store, brokers: c.ListenAddrs(), instance: "a", log: slog.Default(), m: m, txnTimeout: 10 * time.Second,
		clock: processors.FixedClock{T: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)}}
	spec := &stageSpec{Stage: topology.Stage{Name: "c1s"}, OutputTopic: "k.1s"}
	k := &kinesisStage{e: e, spec: spec, log: slog.Default(), changelog: "kin-changelog", clParts: 1,
		shards: map[string]*shardState{}, snapHints: map[string]string{}, restoring: map[string]*unitLock{}}
	k.em = &emitter{e: e, spec: spec, input: "ticks", log: k.log}
	return k, store
}

// testShardProducer returns a transactional producer to k's changelog.
func testShardProducer(t *testing.T, k *kinesisStage, id string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(k.e.kafkaOpts(kgo.TransactionalID(id), kgo.TransactionTimeout(k.e.txnTimeout),
		kgo.RecordPartitioner(changelogPartitioner(k.changelog)), kgo.DefaultProduceTopic(k.changelog))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// A child shard that reaches its end before its first commit (no record
// reached it, idle advance closed nothing) commits the keys its parents
// handed it when it ends: its own children (a merge) read them from its
// changelog, and would otherwise start without them.
func TestKinesisChildEndsBeforeFirstCommit(t *testing.T) {
	k, _ := testShardStage(t)
	ctx := context.Background()
	const child = "shardId-000000000002"
	handed := map[string][]byte{"kdev-001#temperature": []byte("open window"), "kdev-001#humidity": []byte("open window too")}
	sh := &shardState{id: child, part: shardNumber(child), unit: unit{proc: &countingProc{}, handoff: handed},
		cl: testShardProducer(t, k, "kin.c1s."+child)}
	k.shards[child] = sh
	if err := k.End(ctx, kinesis.Shard{ID: child, Parents: []string{"shardId-000000000000"}}, []string{"shardId-000000000004"}); err != nil {
		t.Fatal(err)
	}
	if k.shard(child) != nil {
		t.Fatal("the ended shard is still open")
	}
	// The merged child reads it from the changelog (on another instance:
	// this one's Pebble copy is dropped).
	u := k.unit(child)
	b := k.e.store.NewBatch()
	b.Drop(u.ns, u.part)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	st, err := k.loadUnit(ctx, testShardProducer(t, k, "kin.c1s.shardId-000000000004"), child, true)
	if err != nil {
		t.Fatal(err)
	}
	if !st.found || len(st.entries) != len(handed) {
		t.Fatalf("the ended child's committed state: found %v, entries %q; want the %d keys it was handed", st.found, st.entries, len(handed))
	}
	for key, v := range handed {
		if string(st.entries[key]) != string(v) {
			t.Fatalf("entry %q: %q, want %q", key, st.entries[key], v)
		}
	}
}
