package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkAggregatorCore-2        	 3507937	       652.8 ns/op	       400 cpu-ns/op	   2413244 trades/cpu-s	      13 B/op	       0 allocs/op
BenchmarkAggregatorCoreLimit-2   	 2118441	       664.2 ns/op	       200 cpu-ns/op	   4590965 trades/cpu-s	       8 B/op	       0 allocs/op
BenchmarkAggregatorCoreLimit-2   	 2118441	       664.2 ns/op	       220 cpu-ns/op	   4590965 trades/cpu-s	       8 B/op	       0 allocs/op
BenchmarkAggregatorCore-2        	 3507937	       652.8 ns/op	       330 cpu-ns/op	   2413244 trades/cpu-s	      13 B/op	       0 allocs/op
BenchmarkAggregatorCore-2        	 3507937	       652.8 ns/op	       300 cpu-ns/op	   2413244 trades/cpu-s	      13 B/op	       0 allocs/op
BenchmarkAggregatorCoreLimit-2   	 2118441	       664.2 ns/op	       300 cpu-ns/op	   4590965 trades/cpu-s	       8 B/op	       0 allocs/op
PASS
`

func TestRatioOfMedians(t *testing.T) {
	var out strings.Builder
	if err := run(strings.NewReader(sample), &out, "AggregatorCore", "AggregatorCoreLimit", 1.5); err != nil {
		t.Fatal(err)
	}
	// medians 330 and 220: 1.50×, within the target; rounds 400/200, 330/220, 300/300.
	for _, want := range []string{
		"AggregatorCore           cpu-ns/op: median 330.0 over 3 runs (300.0–400.0)",
		"AggregatorCoreLimit      cpu-ns/op: median 220.0 over 3 runs (200.0–300.0)",
		"rounds AggregatorCore / AggregatorCoreLimit: 2.00 1.50 1.00×",
		"= 1.50× (ratio of the medians), target ≤ 1.50×: met",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := run(strings.NewReader(sample), &out, "AggregatorCore", "AggregatorCoreLimit", 1.4); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "target ≤ 1.40×: not met") {
		t.Errorf("1.50× against 1.4: %s", out.String())
	}
}

func TestMissingBenchmark(t *testing.T) {
	var out strings.Builder
	if err := run(strings.NewReader(sample), &out, "AggregatorCore", "Nothing", 1.5); err == nil {
		t.Error("no error for a benchmark without results")
	}
}
