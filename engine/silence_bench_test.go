package engine

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/state"
)

// BenchmarkSilenceMillionDevices runs a silence processor on the engine's
// Pebble store (as a live stage does) over one million devices with the
// three shipped levels, committing its changes every 10,000 readings like
// a transaction: the live heap and resident set after 100,000 and after
// 1,000,000 devices (bounded: they must not grow with the fleet), then the
// cost of firing 1,000 due timers among the million, and of all of them
// (3 million events, in steps). Run by `make bench`, not `make test`.
func BenchmarkSilenceMillionDevices(b *testing.B) {
	const devices, perCommit = 1_000_000, 10_000
	levels := []processors.SilenceLevel{
		{Name: "unreachable", After: 3 * 24 * time.Hour, Action: "status"},
		{Name: "alert1", After: 7 * 24 * time.Hour, Action: "alert"},
		{Name: "alert2", After: 10 * 24 * time.Hour, Action: "alert"},
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for range b.N {
		db, err := state.Open(b.TempDir(), nil)
		if err != nil {
			b.Fatal(err)
		}
		s, err := processors.NewSilence(processors.SilenceConfig{Levels: levels, Key: "device", Time: "ts", Carry: []string{"owner"}}, processors.FixedClock{T: t0})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.UseStore(partStore{db, "silence", 0}); err != nil {
			b.Fatal(err)
		}
		commit := func() {
			batch := db.NewBatch()
			s.Changes(func(k, v []byte) { batch.Set("silence", 0, k, cloneOrNil(v)) })
			if err := batch.Commit(); err != nil {
				b.Fatal(err)
			}
			if err := s.Err(); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		var base runtime.MemStats
		runtime.ReadMemStats(&base)
		var out processors.Output
		for d := range devices {
			ts := t0.UnixMilli() + int64(d) // one ms apart: 1,000 timers per second of due time
			v := fmt.Appendf(nil, `{"device":"dev-%07d","ts":%d,"owner":"owner-%d","temperature":"21.5"}`, d, ts, d%1000)
			s.Process(processors.Record{Offset: int64(d), Value: v, Timestamp: ts}, &out)
			if (d+1)%perCommit == 0 {
				commit()
			}
			if d+1 == devices/10 || d+1 == devices {
				runtime.GC()
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				tag := "100k"
				if d+1 == devices {
					tag = "1M"
				}
				b.ReportMetric((float64(m.HeapAlloc)-float64(base.HeapAlloc))/(1<<20), "heap-MiB-"+tag)
				b.ReportMetric(procStatusMiB("VmRSS:"), "RSS-MiB-"+tag)
			}
		}
		b.ReportMetric(procStatusMiB("VmHWM:"), "peak-RSS-MiB")

		due := t0.Add(3 * 24 * time.Hour).UnixMilli()
		start := time.Now()
		s.AdvanceTo(due+999, &out) // the first 1,000 devices' unreachable
		few := time.Since(start)
		if len(out.Events) != 1000 {
			b.Fatalf("%d events fired, want 1000", len(out.Events))
		}
		b.ReportMetric(float64(few.Nanoseconds())/1000, "ns/fired-of-1k")
		commit()
		fired, end := 0, t0.Add(11*24*time.Hour).UnixMilli()
		start = time.Now()
		for {
			out.Reset()
			s.AdvanceTo(end, &out)
			commit()
			if len(out.Events) == 0 {
				break
			}
			fired += len(out.Events)
		}
		if fired != 3*devices-1000 {
			b.Fatalf("%d events fired, want %d", fired, 3*devices-1000)
		}
		b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(fired), "ns/fired-all")
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		b.ReportMetric((float64(m.HeapAlloc)-float64(base.HeapAlloc))/(1<<20), "heap-MiB-after-firing")
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// procStatusMiB reads a memory figure of /proc/self/status (VmRSS, VmHWM),
// 0 where unknown.
func procStatusMiB(field string) float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if f := bytes.Fields(line); len(f) >= 2 && string(f[0]) == field {
			kb, _ := strconv.ParseFloat(string(f[1]), 64)
			return kb / 1024
		}
	}
	return 0
}
