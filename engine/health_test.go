package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
)

type stepClock struct{ t time.Time }

func (c *stepClock) now() time.Time { return c.t }

// Each readiness check fails alone and says why; liveness fails only when
// a loop stops turning; kandle_ready and the log follow every change.
func TestHealthChecks(t *testing.T) {
	clk := &stepClock{t: time.Unix(1_700_000_000, 0)}
	reg := prometheus.NewRegistry()
	h, err := newHealth(reg, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	var changes []string
	h.onChange = func(ready bool, why string) {
		changes = append(changes, map[bool]string{true: "ready", false: "not ready: " + why}[ready])
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1")) // never a group member
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	expect := func(alive, ready bool, why string) {
		t.Helper()
		st := h.status()
		got := strings.Join(st.Reasons, "; ")
		if st.Alive != alive || st.Ready != ready || !strings.Contains(got, why) || (why == "" && got != "") {
			t.Fatalf("status alive=%v ready=%v reasons %q; want alive=%v ready=%v reasons containing %q", st.Alive, st.Ready, got, alive, ready, why)
		}
		want := 0.0
		if ready {
			want = 1
		}
		if g := gaugeValue(t, h.ready); g != want {
			t.Fatalf("kandle_ready = %v, want %v", g, want)
		}
	}

	expect(true, false, "starting")
	h.notRunning("brokers [b:9092] unreachable: connection refused")
	expect(true, false, "brokers [b:9092] unreachable")
	h.moved("1m", "", nil)
	h.moved("sink lake", "", nil)
	h.started()
	expect(true, false, "1m: partitions being assigned or restored")
	h.beat("1m", true)
	h.beat("sink lake", true)
	expect(true, true, "")

	// A turn of a client outside its group: partitions not assigned.
	fs := kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "trades", Partitions: []kgo.FetchPartition{
		{Partition: 0, HighWatermark: 20_010, Records: []*kgo.Record{{Offset: 8}, {Offset: 9}}}}}}}}
	h.turn("1m", cl, fs)
	expect(true, false, "1m: partitions being assigned or restored")
	h.beat("1m", true)
	expect(true, false, "1m: 20000 records behind (threshold 10000)")
	if g := gaugeValue(t, h.unready.WithLabelValues("lag")); g != 1 {
		t.Fatalf("kandle_unready{check=lag} = %v, want 1", g)
	}
	h.moved("1m", "trades", []int32{0}) // partition 0 went elsewhere: its lag no longer counts
	h.beat("1m", true)
	expect(true, true, "")
	if g := gaugeValue(t, h.unready.WithLabelValues("lag")); g != 0 {
		t.Fatalf("kandle_unready{check=lag} = %v, want 0", g)
	}

	h.sinkDown("sink lake", "flush failing: connection refused")
	expect(true, false, "sink lake: store unreachable: flush failing: connection refused")
	h.sinkDown("sink lake", "")
	expect(true, true, "")

	clk.t = clk.t.Add(DefaultStallAfter + time.Second)
	h.beat("sink lake", true)
	expect(false, false, "1m: no turn of its loop for 2m1s (stuck)")
	h.beat("1m", true)
	expect(true, true, "")

	if len(changes) < 8 || changes[len(changes)-1] != "ready" || !strings.HasPrefix(changes[0], "not ready: starting") {
		t.Fatalf("readiness changes logged: %q", changes)
	}
}

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestReadinessBeforeEngine: kandle_ready is on the registry, at 0, as soon
// as RegisterReadiness ran (kandle run calls it when /metrics starts
// serving, before the sinks' stores answer and the engine exists), and the
// engine's health built later on the same registry drives those gauges.
func TestReadinessBeforeEngine(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := RegisterReadiness(reg); err != nil {
		t.Fatal(err)
	}
	scrape := func(want ...string) {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				name := mf.GetName()
				for _, l := range m.GetLabel() {
					name += "{" + l.GetName() + "=" + l.GetValue() + "}"
				}
				got = append(got, fmt.Sprintf("%s %v", name, m.GetGauge().GetValue()))
			}
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("scrape:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	scrape("kandle_ready 0", "kandle_unready{check=starting} 1")

	clk := &stepClock{t: time.Unix(1_700_000_000, 0)}
	h, err := newHealth(reg, clk.now)
	if err != nil {
		t.Fatalf("the engine cannot take over the early gauges: %v", err)
	}
	h.moved("sink lake", "", nil)
	h.started()
	h.beat("sink lake", true)
	if st := h.status(); !st.Ready {
		t.Fatalf("not ready: %v", st.Reasons)
	}
	scrape("kandle_ready 1", "kandle_unready{check=starting} 0")
}
