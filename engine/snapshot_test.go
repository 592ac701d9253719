package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
)

// snapshotMeta is how the stage names a snapshot in its offset commits.
const snapshotMeta = "kandle.snapshot/1 "

// A new owner with an empty disk reads the changelog from the last
// committed snapshot, not from its start: exactly the records from the
// snapshot's marker to its restore barrier, far fewer than the changelog
// holds. Its candles then equal a replay of the input.
func TestEmptyDiskRestoreReadsFromTheSnapshot(t *testing.T) {
	testkit.WallClockTest(t)
	testSnapshotTakeover(t, false)
}

// A transaction holding a snapshot that aborts (here its offset commit is
// refused) leaves no trace: its records are invisible to read-committed
// readers, its position is never committed, the stage rebuilds and
// snapshots again, and a new owner on an empty disk still makes exactly
// the replay's candles.
func TestAbortedSnapshotIsInvisible(t *testing.T) {
	testkit.WallClockTest(t)
	testSnapshotTakeover(t, true)
}

func testSnapshotTakeover(t *testing.T, abortFirst bool) {
	r := newKfakeRig(t, 1)
	ctx := context.Background()
	var aborted atomic.Int64 // marker offset of the snapshot whose commit was refused
	aborted.Store(-1)
	if abortFirst {
		r.c.ControlKey(int16(kmsg.TxnOffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
			r.c.KeepControl()
			if aborted.Load() >= 0 {
				return nil, nil, false
			}
			tr := req.(*kmsg.TxnOffsetCommitRequest)
			off, ok := snapshotIn(tr)
			if !ok {
				return nil, nil, false
			}
			aborted.Store(off)
			resp := tr.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
			for _, rt := range tr.Topics {
				st := kmsg.NewTxnOffsetCommitResponseTopic()
				st.Topic = rt.Topic
				for _, rp := range rt.Partitions {
					sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
					sp.Partition, sp.ErrorCode = rp.Partition, kerr.UnknownServerError.Code
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			return resp, nil, true
		})
	}

	// 600 keys, each traded in every minute of 12, a commit a minute: a
	// changelog many times longer than the state (the keys' open windows).
	const keys, batches = 600, 12
	regA := prometheus.NewRegistry()
	stopA := r.start("a", t.TempDir(), regA)
	id := 0
	for b := 1; b <= batches; b++ {
		at := r.minute.Add(time.Duration(b) * time.Minute)
		r.clock.Set(at.Add(time.Second))
		var recs []*kgo.Record
		for k := range keys {
			id++
			sym := fmt.Sprintf("S%03d", k)
			v := fmt.Appendf(nil, `{"symbol":%q,"ts":%d,"price":"%d.%d","qty":"0.1","trade_id":%d}`,
				sym, at.UnixMilli(), 100+k, b, id)
			recs = append(recs, &kgo.Record{Topic: "trades", Partition: 0, Key: []byte(sym), Value: v})
		}
		if err := r.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		r.waitFor(fmt.Sprintf("batch %d to commit", b), 60*time.Second, func() bool { return r.committed(0) == int64(id) })
	}
	stopA()
	if n := counter(t, regA, "kandle_changelog_snapshots_total", "c1m"); n < 1 {
		t.Fatalf("the first owner committed %v snapshots over a changelog many times its state", n)
	}
	if abortFirst {
		if aborted.Load() < 0 {
			t.Fatal("no transaction with a snapshot was aborted: the test did not test that")
		}
		if n := counter(t, regA, "kandle_transactions_total", "aborted"); n < 1 {
			t.Fatalf("the transaction whose offset commit was refused was not aborted (%v aborts)", n)
		}
	}
	snap := committedSnapshot(t, r)
	changelog := r.top.Name + ".c1m.changelog"
	if abortFirst {
		if snap == aborted.Load() {
			t.Fatalf("the position of the aborted snapshot (%d) was committed", snap)
		}
		for _, rec := range testkit.ReadTopic(t, r.seeds, changelog) {
			if rec.Offset == aborted.Load() && !rec.Attrs.IsControl() {
				t.Fatalf("the aborted snapshot's marker is visible to read-committed readers: %q=%q", rec.Key, rec.Value)
			}
		}
	}

	// The state the changelog holds read from the snapshot is the state read
	// from its start: no entry missing, no deleted entry back.
	if from, all := stateOf(t, r, changelog, snap), stateOf(t, r, changelog, 0); !maps.EqualFunc(from, all, bytes.Equal) {
		t.Fatalf("the changelog read from the snapshot at %d holds %d entries, read from its start %d (or other values)", snap, len(from), len(all))
	} else if len(all) == 0 {
		t.Fatal("the changelog holds no state")
	}

	// A new owner on an empty disk.
	regB := prometheus.NewRegistry()
	r.start("b", t.TempDir(), regB)
	r.waitFor("b to restore the partition", 30*time.Second, func() bool { return gauge(t, regB, "kandle_partitions_owned") == 1 })
	all, fromSnap := 0, 0
	for _, rec := range testkit.ReadTopic(t, r.seeds, changelog) {
		if rec.Attrs.IsControl() {
			continue
		}
		all++
		if rec.Offset >= snap {
			fromSnap++ // the snapshot, what followed, and b's restore barrier
		}
	}
	read := int(counter(t, regB, "kandle_restored_changelog_records_total", "c1m"))
	t.Logf("changelog: %d committed records; b read %d, from the snapshot at %d", all, read, snap)
	if read != fromSnap {
		t.Fatalf("b read %d changelog records; from the committed snapshot at offset %d there are %d", read, snap, fromSnap)
	}
	if read*2 > all {
		t.Fatalf("b read %d of the changelog's %d records: the snapshot bounds nothing", read, all)
	}

	// Every key's first window closes with trades b processes; the candles
	// equal a replay of the whole input.
	end := r.minute.Add((batches + 2) * time.Minute)
	r.clock.Set(end.Add(time.Second))
	var recs []*kgo.Record
	for k := range keys {
		id++
		sym := fmt.Sprintf("S%03d", k)
		v := fmt.Appendf(nil, `{"symbol":%q,"ts":%d,"price":"7","qty":"1","trade_id":%d}`, sym, end.UnixMilli(), id)
		recs = append(recs, &kgo.Record{Topic: "trades", Partition: 0, Key: []byte(sym), Value: v})
	}
	if err := r.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	want := replayOf(t, r)
	if len(want["c.1m"]) < keys {
		t.Fatalf("the replay closed %d windows, want at least %d", len(want["c.1m"]), keys)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := map[string][]string{"c.1m": r.read("c.1m")}
		sort.Strings(got["c.1m"])
		diff := diffOutputs(want, closedByInput(t, want, got))
		if diff == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new owner's candles differ from a replay:\n%s", diff)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// snapshotIn returns the snapshot offset a transactional offset commit carries.
func snapshotIn(req *kmsg.TxnOffsetCommitRequest) (int64, bool) {
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			if rp.Metadata == nil || !strings.HasPrefix(*rp.Metadata, snapshotMeta) {
				continue
			}
			off, _, _ := strings.Cut(strings.TrimPrefix(*rp.Metadata, snapshotMeta), " ")
			if o, err := strconv.ParseInt(off, 10, 64); err == nil {
				return o, true
			}
		}
	}
	return 0, false
}

// committedSnapshot is the snapshot offset committed with the group's
// offset of trades partition 0.
func committedSnapshot(t *testing.T, r *kfakeRig) int64 {
	t.Helper()
	offs, err := r.adm.FetchOffsets(context.Background(), r.group)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := offs.Lookup("trades", 0)
	if !ok || !strings.HasPrefix(o.Metadata, snapshotMeta) {
		t.Fatalf("no snapshot committed with the group's offset (metadata %q)", o.Metadata)
	}
	off, _, _ := strings.Cut(strings.TrimPrefix(o.Metadata, snapshotMeta), " ")
	n, err := strconv.ParseInt(off, 10, 64)
	if err != nil {
		t.Fatalf("snapshot metadata %q: %v", o.Metadata, err)
	}
	return n
}

// replayOf replays the rig's input, as `kandle replay` does.
func replayOf(t *testing.T, r *kfakeRig) map[string][]string {
	t.Helper()
	var buf bytes.Buffer
	_, err := engine.Replay(context.Background(), r.top, r.seeds, engine.ReplayOptions{
		Started: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Out: &topicRecorder{w: &buf}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if topic, c, ok := strings.Cut(l, " "); ok {
			out[topic] = append(out[topic], c)
		}
	}
	for k := range out {
		sort.Strings(out[k])
	}
	return out
}

// stateOf applies the committed state entries of a changelog from offset
// from on, in order, as a restore does: the live entries at its end.
func stateOf(t *testing.T, r *kfakeRig, changelog string, from int64) map[string][]byte {
	t.Helper()
	st := map[string][]byte{}
	for _, rec := range testkit.ReadTopic(t, r.seeds, changelog) {
		if rec.Offset < from || rec.Attrs.IsControl() || len(rec.Key) < 2 || rec.Key[0] != 'p' {
			continue
		}
		if rec.Value == nil {
			delete(st, string(rec.Key))
		} else {
			st[string(rec.Key)] = rec.Value
		}
	}
	return st
}
