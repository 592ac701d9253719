package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
)

// TestRevisionMetrics: kandle_revisions_total counts the candles with a rev
// above 0 a stage emits, by stage and timeframe; a stage with a revision
// horizon has the series (and, for a candles stage, its late,
// unknown_trade and beyond_horizon dead-letter series) from the first
// scrape, a rollup with one its beyond_horizon series; a stage without one
// has none.
func TestRevisionMetrics(t *testing.T) {
	g := revGraph(t) // 1m with a horizon, rollups 5m and 1d above it; plain and plain5m without
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range g.stages {
		m.zeroRevisions(s)
	}
	if n := testutil.CollectAndCount(m.revisions); n != 3 {
		t.Errorf("%d revision series at start, want 3 (1m, 5m and 1d; plain has no horizon)", n)
	}
	if n := testutil.CollectAndCount(m.rejected); n != len(revisionReasons)+2 {
		t.Errorf("%d dead-letter series at start, want %d (1m's revision reasons, 5m's and 1d's beyond_horizon)", n, len(revisionReasons)+2)
	}
	if v := testutil.ToFloat64(m.rejected.WithLabelValues("5m", "beyond_horizon")); v != 0 {
		t.Errorf("rejected{5m,beyond_horizon} = %v at start", v)
	}
	for _, r := range []string{"late", "unknown_trade", "beyond_horizon"} {
		if v := testutil.ToFloat64(m.rejected.WithLabelValues("1m", r)); v != 0 {
			t.Errorf("rejected{1m,%s} = %v at start", r, v)
		}
	}

	open := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	cs := []candle.Candle{{Symbol: "BTC", OpenTime: open}, {Symbol: "BTC", OpenTime: open, Rev: 1},
		{Symbol: "ETH", OpenTime: open}, {Symbol: "BTC", OpenTime: open, Rev: 2}}
	countRevisions(m, g.byName["1m"], cs)
	countRevisions(m, g.byName["5m"], cs[:1])
	countRevisions(m, g.byName["plain"], cs[2:3])
	if v := testutil.ToFloat64(m.revisions.WithLabelValues("1m", "1m")); v != 2 {
		t.Errorf("revisions{1m} = %v, want 2 (the candles with rev 1 and 2)", v)
	}
	if v := testutil.ToFloat64(m.revisions.WithLabelValues("5m", "5m")); v != 0 {
		t.Errorf("revisions{5m} = %v after a final at rev 0, want 0", v)
	}
	if n := testutil.CollectAndCount(m.revisions); n != 3 {
		t.Errorf("%d revision series, want 3: a stage without a horizon that emitted no revision gets none", n)
	}
}

// TestWindowPartitionIsSymbols: on an output topic keyed by window, a
// candle keyed symbol@open_time lands on the partition Kafka's default
// partitioner (kgo.StickyKeyPartitioner, murmur2) gives the bare symbol,
// for many symbols (some holding '@' or digits) and partition counts; a
// quiet record (headers, bare symbol key) too; other topics are
// partitioned by the whole key as before, changelogs by the record's own
// partition.
func TestWindowPartitionIsSymbols(t *testing.T) {
	kafkaP := kgo.StickyKeyPartitioner(nil).ForTopic("x")
	ours := outputPartitioner([]string{"cl"}, []string{"c.1m"})
	win, plain, cl := ours.ForTopic("c.1m"), ours.ForTopic("c.5m"), ours.ForTopic("cl")
	quietHdr := []kgo.RecordHeader{{Key: QuietHeader, Value: []byte(QuietKind)}}
	symbols := []string{"", "A", "BTC", "BTC-USD", "ETH-USDT", "a@b", "x@1", "@", "12345", "sym@-"}
	for i := range 500 {
		symbols = append(symbols, fmt.Sprintf("S%d-%x", i, i*7919))
	}
	opens := []int64{0, 1, 1700000000000, 1767225600000, -60000}
	for _, n := range []int{1, 2, 3, 4, 6, 7, 8, 12, 16, 31, 64, 100, 256} {
		for _, sym := range symbols {
			want := kafkaP.Partition(&kgo.Record{Key: []byte(sym)}, n)
			for _, open := range opens {
				c := candle.Candle{Symbol: sym, OpenTime: open}
				key := appendWindowKey(nil, &c)
				if got := string(windowKeySymbol(key)); got != sym {
					t.Fatalf("windowKeySymbol(%q) = %q, want %q", key, got, sym)
				}
				if got := win.Partition(&kgo.Record{Key: key}, n); got != want {
					t.Fatalf("%d partitions: window key %q on partition %d, symbol %q on %d", n, key, got, sym, want)
				}
				if got, w := plain.Partition(&kgo.Record{Key: key}, n), kafkaP.Partition(&kgo.Record{Key: key}, n); got != w {
					t.Fatalf("%d partitions: key %q on a topic not keyed by window: partition %d, want %d", n, key, got, w)
				}
			}
			if got := win.Partition(&kgo.Record{Key: []byte(sym), Headers: quietHdr}, n); got != want {
				t.Fatalf("%d partitions: quiet record of %q on partition %d, want %d", n, sym, got, want)
			}
		}
		if got := cl.Partition(&kgo.Record{Key: []byte("BTC"), Partition: int32(n - 1)}, n); got != n-1 {
			t.Fatalf("changelog record set to partition %d went to %d", n-1, got)
		}
	}
	// The slab writes the same key, in its chunk.
	var o outSlab
	c := candle.Candle{Symbol: "BTC@X", Timeframe: "1m", OpenTime: 1767225600000}
	if r := o.candle("c.1m", &c, true); string(r.Key) != "BTC@X@1767225600000" {
		t.Errorf("window key %q, want BTC@X@1767225600000", r.Key)
	}
	if r := o.candle("c.1m", &c, false); string(r.Key) != "BTC@X" {
		t.Errorf("symbol key %q, want BTC@X", r.Key)
	}
}
