package s3parquet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/sinkkit"
	"github.com/kandle/kandle/internal/testkit"
)

// putGate stands between one writer and the shared S3 server. While
// closed, it takes the whole body of each PUT and holds the request, as a
// network that delays a cut-off instance's write would; release lets the
// held PUTs reach the store, in order, even if their client gave up.
type putGate struct {
	inner   http.Handler
	mu      sync.Mutex
	closed  bool
	held    chan struct{} // one value per PUT taken and held
	release chan struct{} // closed by open
}

func newPutGate(inner http.Handler) *putGate {
	return &putGate{inner: inner, held: make(chan struct{}, 64), release: make(chan struct{})}
}

func (g *putGate) close() { g.mu.Lock(); g.closed = true; g.mu.Unlock() }

func (g *putGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		g.closed = false
		close(g.release)
	}
}

func (g *putGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	closed, release := g.closed, g.release
	g.mu.Unlock()
	if r.Method == http.MethodPut && closed {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		g.held <- struct{}{}
		<-release
		r = r.WithContext(context.WithoutCancel(r.Context()))
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	g.inner.ServeHTTP(w, r)
}

// waitHeld waits for one held PUT.
func waitHeld(t *testing.T, held <-chan struct{}) {
	t.Helper()
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the old owner's PUT never reached the gate")
	}
}

// cutOff closes gate, buffers cs in s and starts its flush, which hangs
// at the gate; it returns once the PUT is held, with the flush's result
// to come.
func cutOff(ctx context.Context, t *testing.T, gate *putGate, s *Sink, cs []candle.Candle) <-chan error {
	t.Helper()
	gate.close()
	writeBatches(t, s, cs, 100)
	flushed := make(chan error, 1)
	go func() { flushed <- s.Flush(ctx) }()
	waitHeld(t, gate.held)
	return flushed
}

// dayCandles returns gen's 1m candles of BTC/USDT on the UTC day of
// 2026-11-22 (1440 of them, in open_time order).
func dayCandles() []candle.Candle {
	var out []candle.Candle
	lo := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC).UnixMilli()
	for _, c := range gen("BTC/USDT") {
		if c.Timeframe == "1m" && c.OpenTime >= lo && c.OpenTime < lo+86_400_000 {
			out = append(out, c)
		}
	}
	return out
}

// TestZombieWriterFenced moves a lake partition between two owners in the
// middle of a flush. The old owner (a) read the day's object and its PUT
// hangs in the network (a gate holds it) while it is cut off; the new owner
// (b) re-reads the candles a never committed plus newer ones and writes the
// same object. Then the old PUT lands. With conditional writes it is
// refused (412): a reads the object again, finds b's candles, merges and
// leaves them all in place. Nothing b wrote is lost or rolled back.
//
// Both cases: the object existed when a wrote it (If-Match its ETag, from
// the write cache), and it did not (a create-only PUT, If-None-Match: *).
func TestZombieWriterFenced(t *testing.T) {
	t.Parallel()
	all := dayCandles()
	set1, set2, set3 := all[:400], all[400:800], all[800:]
	for _, tc := range []struct {
		name   string
		before []candle.Candle // flushed by a while it still owned the partition
	}{
		{"object existed (If-Match)", set1},
		{"object was new (If-None-Match)", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFakeS3(t, "lake")
			gate := newPutGate(f.handler)
			viaGate := httptest.NewServer(gate)
			defer viaGate.Close()
			defer gate.open() // never leave a handler blocked

			clock := &fakeClock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
			regA := prometheus.NewRegistry()
			cfgA := f.config("lake/candles")
			cfgA.Endpoint = viaGate.URL
			a, err := New(ctx, cfgA, WithLogger(quietLogger()), WithRegisterer(regA), WithClock(clock), WithMinBackoff(time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			writeBatches(t, a, tc.before, 100)
			if err := a.Flush(ctx); err != nil {
				t.Fatal(err)
			}

			// a takes set2 and flushes; it is cut off: its PUT hangs.
			flushed := cutOff(ctx, t, gate, a, set2)

			// b, the partition's new owner, starts from a's last commit:
			// it writes set2 again, then set3, and flushes.
			b, err := New(ctx, f.config("lake/candles"), WithLogger(quietLogger()), WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			writeBatches(t, b, append(append([]candle.Candle{}, set2...), set3...), 100)
			if err := b.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			wantB := expectedObjects("candles", append(append(append([]candle.Candle{}, tc.before...), set2...), set3...))
			checkObjects(t, listObjects(t, f.client(), "lake"), wantB)

			// a's old PUT lands now.
			gate.open()
			select {
			case err := <-flushed:
				if err != nil {
					t.Fatalf("old owner's flush: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the old owner's flush did not end after its PUT was released")
			}
			objs := listObjects(t, f.client(), "lake")
			checkObjects(t, objs, wantB) // every candle of b, none rolled back
			// A new object's write is a create-only PUT that read nothing:
			// its refusal is counted apart from the fencing conflicts of a
			// write based on a read (or on the write cache).
			wantConflicts, wantRefused := 1.0, 0.0
			if tc.before == nil {
				wantConflicts, wantRefused = 0, 1
			}
			if n := counter(t, regA, "kandle_s3parquet_write_conflicts_total"); n != wantConflicts {
				t.Fatalf("write conflicts of the old owner = %v, want %v", n, wantConflicts)
			}
			if n := counter(t, regA, "kandle_s3parquet_create_refused_total"); n != wantRefused {
				t.Fatalf("refused creates of the old owner = %v, want %v", n, wantRefused)
			}

			// An independent reader agrees: the object holds the whole day.
			key := "candles/" + PartitionPath("1m", "BTC/USDT", all[0].OpenTime)
			file := filepath.Join(t.TempDir(), "candles.parquet")
			if err := os.WriteFile(file, objs[key], 0o600); err != nil {
				t.Fatal(err)
			}
			got := testkit.DuckDB(t, file, "SELECT count(*) AS n, count(DISTINCT open_time) AS d, min(open_time) AS lo, max(open_time) AS hi FROM t")
			n := len(tc.before) + len(set2) + len(set3)
			first := all[len(all)-n]
			stamp := func(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05+00") }
			want := fmt.Sprintf(`{"n":"%d","d":"%d","lo":"%s","hi":"%s"}`, n, n, stamp(first.OpenTime), stamp(all[len(all)-1].OpenTime))
			if len(got) != 1 || got[0] != want {
				t.Fatalf("DuckDB reads %v, want %s", got, want)
			}
			t.Logf("DuckDB: %s", got[0])
		})
	}
}

// heldStore holds puts while closed, after their caller read the object:
// a writer paused between its read and its write (a stopped process, a
// long GC pause, a hung disk) in a file:// lake.
type heldStore struct {
	store
	gate *putGate
}

func (h *heldStore) put(ctx context.Context, k string, data []byte, version string, found bool) error {
	h.gate.mu.Lock()
	closed, release := h.gate.closed, h.gate.release
	h.gate.mu.Unlock()
	if closed {
		h.gate.held <- struct{}{}
		<-release
	}
	return h.store.put(ctx, k, data, version, found)
}

// TestZombieWriterFencedFile is TestZombieWriterFenced for a file:// lake:
// the rename is a compare-and-swap under the object's lock file.
func TestZombieWriterFencedFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	all := dayCandles()
	set1, set2, set3 := all[:400], all[400:800], all[800:]
	clock := &fakeClock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	regA := prometheus.NewRegistry()
	a, err := New(ctx, Config{URL: "file://" + dir}, WithLogger(quietLogger()), WithRegisterer(regA), WithClock(clock), WithMinBackoff(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	gate := newPutGate(nil)
	defer gate.open()
	a.st = &heldStore{store: a.st, gate: gate}
	writeBatches(t, a, set1, 100)
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	flushed := cutOff(ctx, t, gate, a, set2)

	b, err := New(ctx, Config{URL: "file://" + dir}, WithLogger(quietLogger()), WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	writeBatches(t, b, append(append([]candle.Candle{}, set2...), set3...), 100)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	gate.open()
	if err := <-flushed; err != nil {
		t.Fatalf("old owner's flush: %v", err)
	}
	name := filepath.Join(dir, filepath.FromSlash(PartitionPath("1m", "BTC/USDT", all[0].OpenTime)))
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	key := PartitionPath("1m", "BTC/USDT", all[0].OpenTime)
	checkObjects(t, map[string][]byte{key: data}, expectedObjects("", all))
	if n := counter(t, regA, "kandle_s3parquet_write_conflicts_total"); n != 1 {
		t.Fatalf("write conflicts of the old owner = %v, want 1", n)
	}
}

// TestConditionalWriteProbe: against a store that honours conditional
// writes (gofakes3) New leaves its probe object under the prefix and
// starts; against one that ignores them (s3rver, a real separate server)
// New refuses to start, says what to do, and the error is not mistaken
// for an unreachable store (kandle would wait for it forever); with
// unconditional_writes the same store is accepted.
func TestConditionalWriteProbe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFakeS3(t, "lake")
	if _, err := New(ctx, f.config("lake/candles"), WithLogger(quietLogger())); err != nil {
		t.Fatalf("New against gofakes3: %v", err)
	}
	if _, err := f.client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("lake"), Key: aws.String("candles/" + ProbeKey)}); err != nil {
		t.Fatalf("no probe object under the prefix: %v", err)
	}
	// A second start (the probe object exists now) passes too.
	if _, err := New(ctx, f.config("lake/candles"), WithLogger(quietLogger())); err != nil {
		t.Fatalf("second New against gofakes3: %v", err)
	}

	srv := testkit.S3rver(t)
	if _, err := s3Client(srv.URL(), "S3RVER", "S3RVER").CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("lake")}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{URL: "s3://lake/candles", Endpoint: srv.URL(), PathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("S3RVER", "S3RVER", "")}
	_, err := New(ctx, cfg, WithLogger(quietLogger()))
	if err == nil {
		t.Fatal("New against s3rver, which ignores conditional writes, succeeded")
	}
	if !strings.Contains(err.Error(), "ignores conditional writes") || !strings.Contains(err.Error(), "unconditional_writes: true") {
		t.Fatalf("error does not say what is wrong and what to do: %v", err)
	}
	if sinkkit.Unreachable(err) || errors.Is(err, errConflict) {
		t.Fatalf("refusal looks transient: %v", err)
	}
	t.Logf("s3rver refused: %v", err)
	cfg.UnconditionalWrites = true
	if _, err := New(ctx, cfg, WithLogger(quietLogger())); err != nil {
		t.Fatalf("New against s3rver with unconditional_writes: %v", err)
	}
}

// busyStore is a store another writer keeps replacing: every put fails
// its condition.
type busyStore struct {
	store
	puts int
}

func (b *busyStore) put(context.Context, string, []byte, string, bool) error {
	b.puts++
	return fmt.Errorf("put: %w", errConflict)
}

// TestConflictsBounded: an object that changes under every write is read,
// merged and written again maxConflicts times, then the flush gives up with
// an error that says why and what to check; each refusal is counted, the
// candles stay buffered (the engine flushes again later), and the object
// is never written over.
func TestConflictsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	s, err := New(ctx, Config{URL: "file://" + t.TempDir()}, WithLogger(quietLogger()), WithRegisterer(reg),
		WithClock(&fakeClock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}), WithMinBackoff(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	busy := &busyStore{store: s.st}
	s.st = busy
	cs := dayCandles()[:10]
	writeBatches(t, s, cs, 10)
	err = s.Flush(ctx)
	if err == nil || !errors.Is(err, errConflict) || !strings.Contains(err.Error(), "conflicting writes in a row") ||
		!strings.Contains(err.Error(), "only one kandle deployment writes into this lake") {
		t.Fatalf("Flush = %v, want a bounded conflict error saying what to check", err)
	}
	if busy.puts != 1+maxConflicts { // the create-only write, then the read-merge-writes
		t.Fatalf("%d writes, want %d", busy.puts, 1+maxConflicts)
	}
	if n := counter(t, reg, "kandle_s3parquet_write_conflicts_total"); n != maxConflicts {
		t.Fatalf("write conflicts = %v, want %d", n, maxConflicts)
	}
	if s.Buffered() != len(cs) {
		t.Fatalf("%d candles buffered after the failed flush, want %d", s.Buffered(), len(cs))
	}
}
