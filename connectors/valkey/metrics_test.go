package valkey

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricsOnGivenRegisterer(t *testing.T) {
	srv := startRedis(t)
	reg := prometheus.NewRegistry()
	s := newSink(t, srv.Addr, func(c *Config) { c.Coalesce = 0 }, WithRegisterer(reg))
	ctx := context.Background()
	s.Active(mk("M", 1, "1", "1", "1", "1", "1", "1", 1))
	if err := s.FlushActive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, []candle1{mk("M", 0, "1", "1", "1", "1", "1", "1", 1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			got[name] = m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	for name, want := range map[string]float64{
		"kandle_valkey_written_total/active": 1, "kandle_valkey_written_total/final": 1,
		"kandle_valkey_write_seconds/active": 1, "kandle_valkey_write_seconds/final": 1,
		"kandle_valkey_round_trips_total":   2, // one pipeline + one script call
		"kandle_valkey_stale_skipped_total": 1, "kandle_valkey_errors_total/final": 0,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v (all: %v)", name, got[name], want, got)
		}
	}
	// A second sink on the same registerer says how to fix it.
	_, err = New(ctx, DefaultConfig(srv.Addr), WithRegisterer(reg))
	if err == nil || !strings.Contains(err.Error(), "WrapRegistererWith") {
		t.Fatalf("second sink on one registerer: %v", err)
	}
}
