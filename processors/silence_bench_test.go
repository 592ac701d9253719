package processors

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// BenchmarkSilenceMillionDevicesInMemory measures a silence processor
// without an engine store (replay, kandle test), which keeps its entries in
// memory, watching one million devices with the three shipped levels: the
// live heap of its state (and the process's peak RSS), and the cost of
// firing — 1,000 timers due among a million, then all of them. The live
// stage keeps them in Pebble instead: engine's BenchmarkSilenceMillionDevices.
// Run by `make bench`, not `make test`.
func BenchmarkSilenceMillionDevicesInMemory(b *testing.B) {
	const devices = 1_000_000
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for range b.N {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		s, err := NewSilence(SilenceConfig{Levels: shippedLevels, Key: "device", Time: "ts", Carry: []string{"owner"}}, FixedClock{T: t0})
		if err != nil {
			b.Fatal(err)
		}
		var out Output
		for d := range devices {
			ts := t0.UnixMilli() + int64(d) // one ms apart: 1,000 timers per second of due time
			v := fmt.Appendf(nil, `{"device":"dev-%07d","ts":%d,"owner":"owner-%d","temperature":"21.5"}`, d, ts, d%1000)
			s.Process(Record{Offset: int64(d), Value: v, Timestamp: ts}, &out)
		}
		s.Changes(func(k, v []byte) {}) // what a commit would encode
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		heap := float64(after.HeapAlloc) - float64(before.HeapAlloc)
		b.ReportMetric(heap/(1<<20), "heap-MiB")
		b.ReportMetric(heap/devices, "bytes/device")
		b.ReportMetric(peakRSSMiB(), "peak-RSS-MiB")

		due := t0.Add(3 * 24 * time.Hour).UnixMilli()
		start := time.Now()
		s.AdvanceTo(due+999, &out) // the first 1,000 devices' unreachable
		few := time.Since(start)
		if len(out.Events) != 1000 {
			b.Fatalf("%d events fired, want 1000", len(out.Events))
		}
		b.ReportMetric(float64(few.Nanoseconds())/1000, "ns/fired-of-1k")
		out.Reset()
		start = time.Now()
		s.AdvanceTo(due+devices, &out)
		b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(len(out.Events)), "ns/fired-all")
		runtime.KeepAlive(s)
	}
}

// peakRSSMiB is the process's peak resident set (VmHWM), 0 where unknown.
func peakRSSMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if f := bytes.Fields(line); len(f) >= 2 && string(f[0]) == "VmHWM:" {
			kb, _ := strconv.ParseFloat(string(f[1]), 64)
			return kb / 1024
		}
	}
	return 0
}
