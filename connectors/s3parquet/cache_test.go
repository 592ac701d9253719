package s3parquet

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kandle/kandle/candle"
)

// requestCounter counts the requests on partition objects that pass
// through it to the S3 server, by method.
type requestCounter struct {
	inner http.Handler
	mu    sync.Mutex
	n     map[string]int
}

func (c *requestCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, ".parquet") {
		c.mu.Lock()
		c.n[r.Method]++
		c.mu.Unlock()
	}
	c.inner.ServeHTTP(w, r)
}

// take returns the counts so far and starts again from zero.
func (c *requestCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

// countedSink starts a sink on f whose requests go through a requestCounter.
func countedSink(t *testing.T, f *fakeS3, cfg Config, reg *prometheus.Registry) (*Sink, *requestCounter) {
	t.Helper()
	rc := &requestCounter{inner: f.handler, n: map[string]int{}}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	cfg.Endpoint = srv.URL
	s, err := New(context.Background(), cfg, WithLogger(quietLogger()), WithRegisterer(reg),
		WithClock(&fakeClock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}), WithMinBackoff(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return s, rc
}

// TestSteadyFlushesDoNoGet: once the sink has written an object, its next
// flushes of that object write it without reading it (the write cache),
// and the objects still hold exactly every candle; the first flush, of new
// objects, reads nothing either (a create-only PUT). With
// unconditional_writes nothing fences such a write, so every flush reads.
func TestSteadyFlushesDoNoGet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	all := dayCandles()
	other := func(cs []candle.Candle) []candle.Candle { // the same minutes of a second symbol
		out := make([]candle.Candle, len(cs))
		for i, c := range cs {
			c.Symbol = "ETH/USDT"
			out[i] = c
		}
		return out
	}
	for _, tc := range []struct {
		name          string
		unconditional bool
	}{{"conditional (shipped)", false}, {"unconditional_writes", true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeS3(t, "lake")
			cfg := f.config("lake/candles")
			cfg.UnconditionalWrites = tc.unconditional
			reg := prometheus.NewRegistry()
			s, rc := countedSink(t, f, cfg, reg)
			var written []candle.Candle
			for round, lo := range []int{0, 300, 600, 900, 1200} {
				set := all[lo : lo+240]
				set = append(set, other(set)...)
				written = append(written, set...)
				writeBatches(t, s, set, 100)
				if err := s.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				want := map[string]int{http.MethodPut: 2}
				if tc.unconditional { // the first flush creates the objects without a GET too
					want[http.MethodGet] = 2
				}
				if n := rc.take(); !maps.Equal(n, want) {
					t.Fatalf("flush %d: requests on objects %v, want %v", round, n, want)
				}
			}
			checkObjects(t, listObjects(t, f.client(), "lake"), expectedObjects("candles", written))
			hits := counter(t, reg, "kandle_s3parquet_write_cache_hits_total")
			if want := map[bool]float64{false: 8, true: 0}[tc.unconditional]; hits != want {
				t.Fatalf("write cache hits = %v, want %v", hits, want)
			}
		})
	}
}

// TestWriteCacheStaleDetected: the sink wrote an object and remembers it;
// another writer (the partition's new owner) then writes the same object.
// The sink's next flush, based on its own stale write, is refused by the
// store (If-Match), so it reads the object, merges and keeps every candle
// of the other writer. Without the If-Match, its write would roll the
// other writer's candles back.
func TestWriteCacheStaleDetected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	all := dayCandles()
	set1, set2, set3 := all[:400], all[400:800], all[800:]
	f := newFakeS3(t, "lake")
	reg := prometheus.NewRegistry()
	a, rc := countedSink(t, f, f.config("lake/candles"), reg)
	writeBatches(t, a, set1, 100)
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if a.cache.len() != 1 {
		t.Fatalf("%d objects cached after the first flush, want 1", a.cache.len())
	}

	b, err := New(ctx, f.config("lake/candles"), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	writeBatches(t, b, set2, 100)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	rc.take()
	writeBatches(t, a, set3, 100)
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkObjects(t, listObjects(t, f.client(), "lake"), expectedObjects("candles", all))
	if n := counter(t, reg, "kandle_s3parquet_write_conflicts_total"); n != 1 {
		t.Fatalf("write conflicts = %v, want 1 (the write based on the stale entry)", n)
	}
	if n := rc.take(); n[http.MethodGet] != 1 || n[http.MethodPut] != 2 {
		t.Fatalf("requests on the object = %v, want the refused PUT, then 1 GET and 1 PUT", n)
	}
	// The entry is fresh again: the next flush writes without a read.
	writeBatches(t, a, set1[:10], 10)
	redo := append([]candle.Candle{}, set3[:5]...)
	for i := range redo {
		redo[i].Trades += 1000 // a newer write of these minutes
	}
	writeBatches(t, a, redo, 10)
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rc.take(); n[http.MethodGet] != 0 || n[http.MethodPut] != 1 {
		t.Fatalf("requests on the object = %v, want 1 PUT and no GET", n)
	}
	checkObjects(t, listObjects(t, f.client(), "lake"), expectedObjects("candles", append(append([]candle.Candle{}, all...), redo...)))
}

// TestWriteCacheBounded: the cache keeps the most recently written objects
// within write_cache_bytes and forgets the rest.
func TestWriteCacheBounded(t *testing.T) {
	rows := dayCandles()[:10] // 10 candles of about 210 bytes
	one := 0
	for i := range rows {
		one += candleBytes(&rows[i])
	}
	c := newWriteCache(2*one + one/2)
	c.store("a", `"1"`, rows)
	c.store("b", `"2"`, rows)
	c.store("c", `"3"`, rows) // evicts a, the least recently written
	if c.len() != 2 || c.take("a") != nil {
		t.Fatalf("after 3 objects in room for 2: %d cached, a still there", c.len())
	}
	if e := c.take("b"); e == nil || e.version != `"2"` || len(e.rows) != 10 {
		t.Fatalf("b = %+v", e)
	}
	if c.take("b") != nil {
		t.Fatal("take left the entry in place")
	}
	c.store("d", "", rows) // a store without ETags: not cached
	big := append(append(append([]candle.Candle{}, rows...), rows...), rows...)
	c.store("e", `"5"`, big) // larger than the whole cache
	if c.len() != 1 || c.take("d") != nil || c.take("e") != nil {
		t.Fatalf("cached %d, want only c", c.len())
	}
}

// TestOverlay: newer candles laid over a cached object's rows, in the
// append fast path (all after the last row) and the general merge (a
// replaced row, a row in the middle, a redelivery), give the rows sorted
// with the newest write winning, and the cached rows keep what they held.
func TestOverlay(t *testing.T) {
	all := benchCandles(10)
	rows := append(make([]candle.Candle, 0, 16), all[:6]...) // room to append in place
	want := slices.Clone(rows)
	byOpen := func(cs ...candle.Candle) map[int64]candle.Candle {
		m := map[int64]candle.Candle{}
		for _, c := range cs {
			m[c.OpenTime] = c
		}
		return m
	}
	changedRow := all[3]
	changedRow.Trades = 999
	for _, tc := range []struct {
		name    string
		add     map[int64]candle.Candle
		want    []candle.Candle
		changed bool
	}{
		{"append", byOpen(all[7], all[6]), append(slices.Clone(all[:6]), all[6], all[7]), true},
		{"replace", byOpen(changedRow, all[8]), append(append(slices.Clone(all[:3]), changedRow), all[4], all[5], all[8]), true},
		{"redelivery", byOpen(all[2], all[5]), all[:6], false},
		{"before", byOpen(all[9], all[0]), append(slices.Clone(all[:6]), all[9]), true},
	} {
		got, changed, stale := overlay(rows[:6], tc.add)
		if changed != tc.changed || len(got) != len(tc.want) || stale != 0 {
			t.Fatalf("%s: %d rows, changed %v; want %d, %v", tc.name, len(got), changed, len(tc.want), tc.changed)
		}
		for i := range got {
			if !got[i].Equal(&tc.want[i]) {
				t.Fatalf("%s: row %d: %+v, want %+v", tc.name, i, got[i], tc.want[i])
			}
		}
		for i := range want {
			if !rows[i].Equal(&want[i]) {
				t.Fatalf("%s: cached row %d changed", tc.name, i)
			}
		}
	}
}

// countingStore counts the gets and puts of a store (a file:// lake).
type countingStore struct {
	store
	gets, puts int
}

func (c *countingStore) get(ctx context.Context, k string) ([]byte, string, bool, error) {
	c.gets++
	return c.store.get(ctx, k)
}

func (c *countingStore) put(ctx context.Context, k string, data []byte, version string, found bool) error {
	c.puts++
	return c.store.put(ctx, k, data, version, found)
}

// TestNewObjectsCreatedWithoutGet: a flush of objects the write cache does
// not hold first tries a create-only write of the new candles alone, so a
// new object is written with one PUT and no GET. An object that exists but
// is not in the cache (written by the sink's previous instance, before a
// restart) refuses that write; the sink then reads it and merges into it,
// so none of the earlier candles is overwritten, and the refusal is not
// counted as a write conflict. Both an S3 lake and a file:// lake.
func TestNewObjectsCreatedWithoutGet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	all := dayCandles()
	sym := func(cs []candle.Candle, s string) []candle.Candle {
		out := make([]candle.Candle, len(cs))
		for i, c := range cs {
			c.Symbol = s
			out[i] = c
		}
		return out
	}
	// The first instance writes two objects; the second, after a restart,
	// writes more candles into both and into a third, new object.
	first := append(append([]candle.Candle{}, all[:600]...), sym(all[:600], "ETH/USDT")...)
	second := append(append(append([]candle.Candle{}, all[600:900]...), sym(all[600:900], "ETH/USDT")...), sym(all[:300], "SOL/USDT")...)
	type counts struct{ gets, puts int }
	// starter opens a sink on the test's lake and returns it with a
	// function that takes its reads and writes of objects so far.
	type starter func(reg *prometheus.Registry) (*Sink, func() counts)
	for _, tc := range []struct {
		name string
		lake func(t *testing.T) (start starter, objects func() map[string][]byte, prefix string)
	}{
		{"s3", func(t *testing.T) (starter, func() map[string][]byte, string) {
			f := newFakeS3(t, "lake")
			return func(reg *prometheus.Registry) (*Sink, func() counts) {
					s, rc := countedSink(t, f, f.config("lake/candles"), reg)
					return s, func() counts { n := rc.take(); return counts{n[http.MethodGet], n[http.MethodPut]} }
				}, func() map[string][]byte { return listObjects(t, f.client(), "lake") },
				"candles"
		}},
		{"file", func(t *testing.T) (starter, func() map[string][]byte, string) {
			dir := t.TempDir()
			return func(reg *prometheus.Registry) (*Sink, func() counts) {
					s, err := New(ctx, Config{URL: "file://" + dir}, WithLogger(quietLogger()), WithRegisterer(reg),
						WithClock(&fakeClock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}), WithMinBackoff(time.Millisecond))
					if err != nil {
						t.Fatal(err)
					}
					cs := &countingStore{store: s.st}
					s.st = cs
					return s, func() counts {
						n := counts{cs.gets, cs.puts}
						cs.gets, cs.puts = 0, 0
						return n
					}
				}, func() map[string][]byte { return readDir(t, dir) },
				""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start, objects, prefix := tc.lake(t)
			regA := prometheus.NewRegistry()
			a, takeA := start(regA)
			writeBatches(t, a, first, 100)
			if err := a.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if n := takeA(); n != (counts{gets: 0, puts: 2}) {
				t.Fatalf("first instance, new objects: %+v, want 2 PUTs and no GET", n)
			}
			if n := counter(t, regA, "kandle_s3parquet_create_refused_total"); n != 0 {
				t.Fatalf("refused creates of new objects = %v, want 0", n)
			}

			regB := prometheus.NewRegistry()
			b, takeB := start(regB)
			writeBatches(t, b, second, 100)
			if err := b.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			// Two existing objects: a refused create, a GET and a PUT each;
			// the new one: one PUT.
			if n := takeB(); n != (counts{gets: 2, puts: 5}) {
				t.Fatalf("second instance: %+v, want 2 GETs and 5 PUTs", n)
			}
			if n := counter(t, regB, "kandle_s3parquet_create_refused_total"); n != 2 {
				t.Fatalf("refused creates = %v, want 2 (the objects of the first instance)", n)
			}
			if n := counter(t, regB, "kandle_s3parquet_write_conflicts_total"); n != 0 {
				t.Fatalf("write conflicts = %v, want 0 (only one writer)", n)
			}
			checkObjects(t, objects(), expectedObjects(prefix, append(append([]candle.Candle{}, first...), second...)))
		})
	}
}
