package kinesis

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/internal/clock"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Two consumers split a 4-shard stream 2/2, every record is delivered, and a
// clean shutdown releases the leases.
func testConsumersShareEvenly(t *testing.T, e *env) {
	e.put(t, 20, 0, 400)
	a := e.startConsumer(t, "a", &recorder{})
	eventually(t, 10*time.Second, "a holds 4", func() bool { return len(a.c.Held()) == 4 })
	b := e.startConsumer(t, "b", &recorder{})
	eventually(t, 15*time.Second, "2/2 split", func() bool { return len(a.c.Held()) == 2 && len(b.c.Held()) == 2 })
	e.put(t, 20, 400, 800)
	eventually(t, 10*time.Second, "all 800 delivered", func() bool {
		n, _ := distinct(append(payloads(a.h.snapshot()), payloads(b.h.snapshot())...))
		return n == 800
	})
	a.close(t)
	b.close(t)
	tbl := &leaseTable{db: e.ddb, name: e.table, duration: time.Second, clock: clock.System{}}
	items, err := tbl.scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 4 {
		t.Fatalf("want 4 leases, got %d", len(items))
	}
	for _, it := range items {
		if it.Owner != "" {
			t.Errorf("lease %s still owned by %q after shutdown", it.ShardID, it.Owner)
		}
	}
	_, dupA := distinct(payloads(a.h.snapshot()))
	t.Logf("redelivered within a: %d", dupA)
}

// A consumer that dies without releasing its leases (simulated crash) loses
// them after lease_duration; the survivor takes them over from the last
// checkpoints. The crashed consumer had processed records it never
// checkpointed: the survivor delivers those again (at-least-once) and
// nothing is lost.
func testCrashedConsumerLeasesMove(t *testing.T, e *env) {
	e.put(t, 20, 0, 400)
	a := e.startConsumer(t, "a", &recorder{})
	b := e.startConsumer(t, "b", &recorder{})
	eventually(t, 15*time.Second, "2/2 split", func() bool { return len(a.c.Held()) == 2 && len(b.c.Held()) == 2 })
	eventually(t, 10*time.Second, "first 400 delivered", func() bool {
		n, _ := distinct(append(payloads(a.h.snapshot()), payloads(b.h.snapshot())...))
		return n == 400
	})
	// From now on a processes but dies before checkpointing.
	a.h.nocp.Store(true)
	mark := len(a.h.snapshot())
	e.put(t, 20, 400, 600)
	eventually(t, 10*time.Second, "a processed new records", func() bool { return len(payloads(a.h.snapshot()[mark:])) > 0 })

	a.c.abandon = true // crash: no Lost, no release
	a.close(t)
	unsaved := payloads(a.h.snapshot()[mark:])
	beforeCrash := len(a.h.snapshot())
	crashedAt := time.Now()
	e.put(t, 20, 600, 1000)
	eventually(t, 15*time.Second, "b holds all 4", func() bool { return len(b.c.Held()) == 4 })
	t.Logf("takeover after %v (lease_duration 1s)", time.Since(crashedAt).Round(10*time.Millisecond))
	eventually(t, 10*time.Second, "all 1000 delivered", func() bool {
		n, _ := distinct(append(payloads(a.h.snapshot()), payloads(b.h.snapshot())...))
		return n == 1000
	})
	pa, pb := payloads(a.h.snapshot()), payloads(b.h.snapshot())
	checkSessionOrder(t, a.h.snapshot())
	checkSessionOrder(t, b.h.snapshot())
	byB := map[string]bool{}
	for _, p := range pb {
		byB[p] = true
	}
	for _, p := range unsaved {
		if !byB[p] {
			t.Fatalf("%s was processed by a but never checkpointed, and b did not deliver it again", p)
		}
	}
	n, dup := distinct(append(pa, pb...))
	t.Logf("delivered %d distinct, %d redelivered (a processed %d records without checkpointing before the crash)", n, dup, len(unsaved))
	for _, ev := range a.h.snapshot()[beforeCrash:] {
		if ev.kind == "lost" {
			t.Fatalf("a crashed, it must not get Lost (%s)", ev.shard)
		}
	}
}

// A stale owner cannot checkpoint once another owner took the lease.
func testLeaseFencing(t *testing.T, e *env) {
	ddb := e.ddb
	ctx := context.Background()
	tbl := &leaseTable{db: ddb, name: "fence", duration: time.Second, clock: clock.System{}}
	if err := tbl.ensure(ctx, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := tbl.create(ctx, "shard-0", nil, TrimHorizon); err != nil {
		t.Fatal(err)
	}
	items, err := tbl.scan(ctx)
	if err != nil || len(items) != 1 {
		t.Fatalf("scan: %v %v", items, err)
	}
	old, err := tbl.take(ctx, items[0], "old")
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Checkpoint(ctx, "100"); err != nil {
		t.Fatalf("owner checkpoint: %v", err)
	}
	// A second take with the stale observation must lose.
	if _, err := tbl.take(ctx, items[0], "late"); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("take with stale counter: want ErrLeaseLost, got %v", err)
	}
	cur, err := tbl.get(ctx, "shard-0")
	if err != nil {
		t.Fatal(err)
	}
	thief, err := tbl.take(ctx, cur, "new")
	if err != nil {
		t.Fatal(err)
	}
	if thief.LastCheckpoint() != "100" {
		t.Fatalf("new owner resumes after %q, want 100", thief.LastCheckpoint())
	}
	if err := old.Checkpoint(ctx, "200"); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("stale owner checkpoint: want ErrLeaseLost, got %v", err)
	}
	if err := old.renew(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("stale owner renew: want ErrLeaseLost, got %v", err)
	}
	if err := thief.Checkpoint(ctx, "300"); err != nil {
		t.Fatalf("new owner checkpoint: %v", err)
	}
	if got, _ := tbl.get(ctx, "shard-0"); got.Checkpoint != "300" || got.Owner != "new" {
		t.Fatalf("lease = %+v, want owner new checkpoint 300", got)
	}
}

// resumeHandler resumes after a position it keeps itself (newer than the lease).
type resumeHandler struct {
	recorder
	after string
}

func (h *resumeHandler) Open(ctx context.Context, s Shard) (string, error) {
	h.recorder.Open(ctx, s)
	return h.after, nil
}

// Open's resumeAfter wins over the lease checkpoint.
func testResumeFromHandler(t *testing.T, e *env) {
	e.put(t, 3, 0, 100)
	var seqs []string
	if err := ReadRange(context.Background(), e.kin, e.stream, Position{TrimHorizon: true}, func(s Shard, b Batch) error {
		for _, r := range b.Records {
			seqs = append(seqs, r.Seq)
		}
		return nil
	}); err != nil || len(seqs) != 100 {
		t.Fatalf("read %d: %v", len(seqs), err)
	}
	h := &resumeHandler{after: seqs[59]}
	run := e.startConsumerH(t, "r", h)
	eventually(t, 10*time.Second, "40 records", func() bool { return len(payloads(h.snapshot())) >= 40 })
	time.Sleep(200 * time.Millisecond) // a few more polls: nothing else may arrive
	run.close(t)
	p := payloads(h.snapshot())
	if len(p) != 40 || p[0] != "k0:60" {
		t.Fatalf("resumed with %d records starting %q, want 40 from k0:60", len(p), p[0])
	}
}

// One consumer reads every record of a 4-shard stream exactly once, each
// shard in sequence order, including records written while it runs (with
// fan-out: after subscriptions were renewed from their continuation). A
// second consumer started after a clean shutdown resumes after the
// checkpoints: it reads only what came later, and nothing twice.
func testReadOnceAndResume(t *testing.T, e *env) {
	e.put(t, 20, 0, 300)
	a := e.startConsumer(t, "a", &recorder{})
	eventually(t, 15*time.Second, "first 300", func() bool { return len(payloads(a.h.snapshot())) >= 300 })
	if e.efo != "" {
		eventually(t, 20*time.Second, "subscriptions renewed", func() bool { return value(a.c.m.subscribe) >= 8 })
	}
	e.put(t, 20, 300, 400)
	eventually(t, 15*time.Second, "400 while running", func() bool { return len(payloads(a.h.snapshot())) >= 400 })
	time.Sleep(1200 * time.Millisecond) // a fan-out event period: nothing more may come
	a.close(t)

	e.put(t, 20, 400, 500)
	b := e.startConsumer(t, "b", &recorder{})
	eventually(t, 15*time.Second, "100 after restart", func() bool { return len(payloads(b.h.snapshot())) >= 100 })
	time.Sleep(1200 * time.Millisecond)
	b.close(t)

	pa, pb := payloads(a.h.snapshot()), payloads(b.h.snapshot())
	if n, dup := distinct(pa); n != 400 || dup != 0 {
		t.Errorf("first consumer: %d distinct records, %d twice; want 400 once", n, dup)
	}
	if n, dup := distinct(pb); n != 100 || dup != 0 || !slices.ContainsFunc(pb, func(p string) bool { return p == "k0:400" }) {
		t.Errorf("resumed consumer: %d distinct, %d twice, want 100 new records once: %v", n, dup, pb)
	}
	for _, p := range pb {
		if n, _ := strconv.Atoi(p[strings.IndexByte(p, ':')+1:]); n < 400 {
			t.Fatalf("resumed consumer read %s again", p)
		}
	}
	// Per shard, both runs together read strictly increasing sequence numbers.
	last := map[string]string{}
	for _, ev := range append(a.h.snapshot(), b.h.snapshot()...) {
		for _, r := range ev.recs {
			if prev, ok := last[ev.shard]; ok && cmpSeq(r.Seq, prev) <= 0 {
				t.Fatalf("shard %s: %s after %s", ev.shard, r.Seq, prev)
			}
			last[ev.shard] = r.Seq
		}
	}
	if len(last) != 4 {
		t.Fatalf("records came from %d shards, want 4", len(last))
	}
	t.Logf("subscriptions: %v/%v, throttled %v/%v", value(a.c.m.subscribe), value(b.c.m.subscribe),
		value(a.c.m.throttled), value(b.c.m.throttled))
}

// value reads a counter.
func value(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
