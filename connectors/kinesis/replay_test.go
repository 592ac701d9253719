package kinesis

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

type got struct {
	shard, seq, data string
}

func readAll(t *testing.T, e *env, from Position) []got {
	t.Helper()
	var out []got
	err := ReadRange(context.Background(), e.kin, e.stream, from, func(s Shard, b Batch) error {
		if s.Lease != nil {
			t.Errorf("replay shard %s has a lease", s.ID)
		}
		for _, r := range b.Records {
			out = append(out, got{s.ID, r.Seq, string(r.Data)})
		}
		return nil
	}, WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func numbers(gs []got) []int {
	var ns []int
	for _, g := range gs {
		_, v, _ := strings.Cut(g.data, ":")
		n, _ := strconv.Atoi(v)
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns
}

func span(from, to int) []int {
	var ns []int
	for n := from; n < to; n++ {
		ns = append(ns, n)
	}
	return ns
}

// ReadRange from TRIM_HORIZON, a timestamp, sequence numbers and
// checkpoints returns exactly the expected records, shard by shard in order.
func testReadRange(t *testing.T, e *env) {
	e.put(t, 30, 0, 150)
	// Arrival timestamps have millisecond precision: let the clock move on
	// so the two halves cannot share a millisecond.
	time.Sleep(20 * time.Millisecond)
	mid := time.Now()
	time.Sleep(20 * time.Millisecond)
	e.put(t, 30, 150, 300)

	all := readAll(t, e, Position{TrimHorizon: true})
	if ns := numbers(all); !slices.Equal(ns, span(0, 300)) {
		t.Fatalf("TRIM_HORIZON read %d records: %v", len(ns), ns)
	}
	if again := readAll(t, e, Position{TrimHorizon: true}); !slices.Equal(again, all) {
		t.Fatal("two reads of the same range differ")
	}
	// Shards come one after another, each in sequence order.
	seen := map[string]bool{}
	for i, g := range all {
		if i > 0 && all[i-1].shard != g.shard {
			if seen[g.shard] {
				t.Fatalf("shard %s read in two pieces", g.shard)
			}
		} else if i > 0 && cmpSeq(all[i-1].seq, g.seq) >= 0 {
			t.Fatalf("shard %s: %s after %s", g.shard, g.seq, all[i-1].seq)
		}
		seen[g.shard] = true
	}

	if ns := numbers(readAll(t, e, Position{Timestamp: &mid})); !slices.Equal(ns, span(150, 300)) {
		t.Fatalf("AT_TIMESTAMP read %v", ns)
	}

	// Per shard: the first record of the second half (AT) and the last of
	// the first half (AFTER, a checkpoint).
	at, after := map[string]string{}, map[string]string{}
	for _, g := range all {
		n := numbers([]got{g})[0]
		if _, ok := at[g.shard]; !ok && n >= 150 {
			at[g.shard] = g.seq
		}
		if n < 150 {
			after[g.shard] = g.seq
		}
	}
	if len(at) != 3 {
		t.Fatalf("second half landed on %d shards, want 3", len(at))
	}
	if ns := numbers(readAll(t, e, Position{Seq: at})); !slices.Equal(ns, span(150, 300)) {
		t.Fatalf("AT_SEQUENCE_NUMBER read %v", ns)
	}
	if ns := numbers(readAll(t, e, Position{After: after})); !slices.Equal(ns, span(150, 300)) {
		t.Fatalf("AFTER_SEQUENCE_NUMBER read %v", ns)
	}

	// ErrStopShard ends one shard's read, not the whole range.
	calls := map[string]int{}
	err := ReadRange(context.Background(), e.kin, e.stream, Position{TrimHorizon: true}, func(s Shard, b Batch) error {
		calls[s.ID]++
		return ErrStopShard
	}, WithLogger(quiet()))
	if err != nil {
		t.Fatalf("ReadRange with ErrStopShard: %v", err)
	}
	for shard := range seen {
		if calls[shard] != 1 {
			t.Errorf("shard %s: %d callbacks after ErrStopShard, want 1 (calls %v)", shard, calls[shard], calls)
		}
	}
}

// cmpSeq compares Kinesis sequence numbers (decimal strings).
func cmpSeq(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}
