package kafka

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/internal/testkit"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func startBroker(t *testing.T, opts ...DevBrokerOption) *DevBroker {
	t.Helper()
	b, err := StartDevBroker(opts...)
	if err != nil {
		t.Fatalf("StartDevBroker: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

func newClient(t *testing.T, addrs []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// consumeN reads n records from topics with a direct consumer.
func consumeN(t *testing.T, ctx context.Context, addrs []string, n int, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	cl := newClient(t, addrs, opts...)
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", len(out), n, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s[%d]: %v", topic, p, err) })
		out = append(out, fs.Records()...)
	}
	return out
}

func kcat(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("kcat", args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat %v: %v\n%s\n(kcat missing? run `bash scripts/test-deps.sh`)", args, err, stderr.String())
	}
	return string(out)
}

var symbols = []string{"BTC", "ETH", "SOL", "ADA", "XRP", "DOGE", "DOT", "AVAX"}

func TestDevBrokerKcatInterop(t *testing.T) {
	port := testkit.FreePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	b := startBroker(t, WithListen(addr), WithSeedTopics(4, "from-kcat", "from-kgo"))
	if got := b.Addrs(); len(got) != 1 || got[0] != addr {
		t.Fatalf("Addrs() = %v, want [%s]", got, addr)
	}
	ctx := testCtx(t)

	// kcat writes key:value lines with kgo's partitioner (murmur2).
	var lines strings.Builder
	for i, s := range symbols {
		fmt.Fprintf(&lines, "%s:{\"symbol\":\"%s\",\"n\":%d}\n", s, s, i)
	}
	kcat(t, lines.String(), "-b", addr, "-P", "-t", "from-kcat", "-K:", "-X", "partitioner=murmur2_random")

	// kgo writes the same keys with its default partitioner.
	cl := newClient(t, b.Addrs())
	for i, s := range symbols {
		r := &kgo.Record{Topic: "from-kgo", Key: []byte(s), Value: []byte(strconv.Itoa(i))}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}

	// kgo reads what kcat wrote; keys land where kgo put them.
	got := consumeN(t, ctx, b.Addrs(), len(symbols), kgo.ConsumeTopics("from-kcat"))
	kcatPart := map[string]int32{}
	for _, r := range got {
		want := fmt.Sprintf("{\"symbol\":\"%s\"", r.Key)
		if !strings.HasPrefix(string(r.Value), want) {
			t.Errorf("record key %s value %s: want a value starting %s", r.Key, r.Value, want)
		}
		kcatPart[string(r.Key)] = r.Partition
	}
	kgoRecs := consumeN(t, ctx, b.Addrs(), len(symbols), kgo.ConsumeTopics("from-kgo"))
	parts := map[int32]bool{}
	for _, r := range kgoRecs {
		if p := kcatPart[string(r.Key)]; p != r.Partition {
			t.Errorf("key %s: kcat partition %d, kgo partition %d", r.Key, p, r.Partition)
		}
		parts[r.Partition] = true
	}
	if len(parts) < 2 {
		t.Errorf("all %d keys hashed to one partition; the partitioner check proves nothing", len(symbols))
	}

	// kcat reads what kgo wrote.
	out := kcat(t, "", "-b", addr, "-C", "-t", "from-kgo", "-e", "-q", "-o", "beginning", "-f", "%k=%s@%p\n")
	var rows []string
	for _, r := range kgoRecs {
		rows = append(rows, fmt.Sprintf("%s=%s@%d", r.Key, r.Value, r.Partition))
	}
	kcatRows := strings.Fields(out)
	sort.Strings(rows)
	sort.Strings(kcatRows)
	if strings.Join(rows, " ") != strings.Join(kcatRows, " ") {
		t.Errorf("kcat read\n%v\nwant\n%v", kcatRows, rows)
	}
}

func TestDevBrokerAutoCreateDefaultPartitions(t *testing.T) {
	b := startBroker(t, WithDefaultPartitions(5))
	ctx := testCtx(t)
	cl := newClient(t, b.Addrs(), kgo.AllowAutoTopicCreation())
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "auto", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("produce to a new topic: %v", err)
	}
	offs, err := EndOffsets(ctx, cl, "auto")
	if err != nil {
		t.Fatal(err)
	}
	if len(offs["auto"]) != 5 {
		t.Fatalf("auto-created topic has %d partitions, want 5", len(offs["auto"]))
	}
}

func TestDevBrokerTransactions(t *testing.T) {
	b := startBroker(t, WithSeedTopics(2, "in", "out", "abort"))
	ctx := testCtx(t)
	const n = 20
	prod := newClient(t, b.Addrs())
	for i := range n {
		r := &kgo.Record{Topic: "in", Key: []byte(symbols[i%len(symbols)]), Value: []byte(strconv.Itoa(i))}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}

	// Consume-transform-produce: outputs and input offsets in one transaction.
	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(b.Addrs()...),
		kgo.TransactionalID("kandle-test-txn"),
		kgo.ConsumerGroup("kandle-test-group"),
		kgo.ConsumeTopics("in"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	seen := 0
	for seen < n {
		fs := sess.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("transact session saw %d of %d records: %v", seen, n, ctx.Err())
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s[%d]: %v", topic, p, err) })
		if fs.NumRecords() == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			t.Fatalf("begin: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			sess.Produce(ctx, &kgo.Record{Topic: "out", Key: r.Key, Value: append([]byte("x"), r.Value...)}, nil)
			seen++
		})
		committed, err := sess.End(ctx, kgo.TryCommit)
		if err != nil || !committed {
			t.Fatalf("end transaction: committed=%v err=%v", committed, err)
		}
	}

	got := consumeN(t, ctx, b.Addrs(), n, kgo.ConsumeTopics("out"), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if len(got) != n {
		t.Fatalf("read %d committed outputs, want %d", len(got), n)
	}
	offs, err := CommittedOffsets(ctx, prod, "kandle-test-group", "in")
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, o := range offs["in"] {
		sum += o
	}
	if sum != n {
		t.Fatalf("group committed offsets sum to %d, want %d (%v)", sum, n, offs)
	}

	// An aborted record is invisible to a read_committed consumer; the
	// committed record after it is visible.
	tx := newClient(t, b.Addrs(), kgo.TransactionalID("kandle-test-abort"))
	for _, c := range []struct {
		val string
		end kgo.TransactionEndTry
	}{{"aborted", kgo.TryAbort}, {"committed", kgo.TryCommit}} {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := tx.ProduceSync(ctx, &kgo.Record{Topic: "abort", Value: []byte(c.val)}).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", c.val, err)
		}
		if err := tx.EndTransaction(ctx, c.end); err != nil {
			t.Fatalf("end transaction (%s): %v", c.val, err)
		}
	}
	rc := consumeN(t, ctx, b.Addrs(), 1, kgo.ConsumeTopics("abort"), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if len(rc) != 1 || string(rc[0].Value) != "committed" {
		var vals []string
		for _, r := range rc {
			vals = append(vals, string(r.Value))
		}
		t.Fatalf("read_committed consumer saw %v, want only [committed]", vals)
	}
	// read_uncommitted sees both, proving the aborted record was written.
	ru := consumeN(t, ctx, b.Addrs(), 2, kgo.ConsumeTopics("abort"), kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	if string(ru[0].Value) != "aborted" {
		t.Fatalf("read_uncommitted first record %q, want aborted", ru[0].Value)
	}
}

func TestDevBrokerDataDirSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	port := testkit.FreePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	ctx := testCtx(t)

	b, err := StartDevBroker(WithListen(addr), WithDataDir(dir), WithSeedTopics(3, "trades"))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("trades"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "trades", Key: []byte(symbols[i%4]), Value: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for read := 0; read < 10; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of 10: %v", read, ctx.Err())
		}
		read += fs.NumRecords()
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	b.Close()

	// Same port, same dir: records, partitions and group offsets are back,
	// and a seed topic added on restart is created.
	b2 := startBroker(t, WithListen(addr), WithDataDir(dir), WithSeedTopics(3, "trades"), WithSeedTopics(2, "candles"))
	cl2 := newClient(t, b2.Addrs())
	ends, err := EndOffsets(ctx, cl2, "trades", "candles")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, o := range ends["trades"] {
		total += o
	}
	if len(ends["trades"]) != 3 || total != 10 {
		t.Fatalf("after restart trades has %d partitions and %d records, want 3 and 10 (%v)", len(ends["trades"]), total, ends)
	}
	if len(ends["candles"]) != 2 {
		t.Fatalf("seed topic added on restart has %d partitions, want 2", len(ends["candles"]))
	}
	committed, err := CommittedOffsets(ctx, cl2, "g")
	if err != nil {
		t.Fatal(err)
	}
	for p, end := range ends["trades"] {
		if committed["trades"][p] != end {
			t.Errorf("partition %d: committed %d after restart, want %d", p, committed["trades"][p], end)
		}
	}
	got := consumeN(t, ctx, b2.Addrs(), 10, kgo.ConsumeTopics("trades"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if len(got) != 10 {
		t.Fatalf("read %d records after restart, want 10", len(got))
	}
}

func TestDevBrokerListenValidation(t *testing.T) {
	for _, bad := range []string{"0.0.0.0:9092", "10.1.2.3:0", "[::1]:0", "nohost", "127.0.0.1:x", "127.0.0.1:70000"} {
		if b, err := StartDevBroker(WithListen(bad)); err == nil {
			b.Close()
			t.Errorf("WithListen(%q): want an error", bad)
		} else if !strings.Contains(err.Error(), "127.0.0.1") {
			t.Errorf("WithListen(%q): error %q should say to use 127.0.0.1", bad, err)
		}
	}
	if _, err := StartDevBroker(WithDefaultPartitions(0)); err == nil {
		t.Error("WithDefaultPartitions(0): want an error")
	}
	// A port already taken is reported, not a panic.
	b := startBroker(t)
	if b2, err := StartDevBroker(WithListen(b.Addrs()[0])); err == nil {
		b2.Close()
		t.Errorf("second broker on %s: want an error", b.Addrs()[0])
	}
	// localhost is the loopback too.
	startBroker(t, WithListen("localhost:0"))
}

func TestSlogBridgeLevels(t *testing.T) {
	var buf bytes.Buffer
	br := slogBridge{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	br.Logf(kfake.LogLevelDebug, "debug %d", 1)
	br.Logf(kfake.LogLevelInfo, "info %d", 2)
	br.Logf(kfake.LogLevelWarn, "warn %d", 3)
	br.Logf(kfake.LogLevelError, "error %d", 4)
	out := buf.String()
	if strings.Contains(out, "debug 1") || strings.Contains(out, "info 2") {
		t.Errorf("info/debug leaked: %s", out)
	}
	if !strings.Contains(out, "level=WARN msg=\"kfake: warn 3\"") || !strings.Contains(out, "level=ERROR msg=\"kfake: error 4\"") {
		t.Errorf("warn/error missing: %s", out)
	}
}
