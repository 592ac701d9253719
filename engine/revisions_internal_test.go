package engine

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
