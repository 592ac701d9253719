// Command benchratio reads `go test -bench` output and prints how one
// benchmark compares with another measured in the same run: the median of
// each, the ratio of the medians, the ratio of each round (the i-th result
// of one against the i-th of the other), and whether the ratio of the
// medians is within a target. make bench-core uses it for the aggregation
// core against its hand-written limit:
//
//	go test -run '^$' -bench 'AggregatorCore(Limit)?$' -count 5 ./processors |
//	    go run ./scripts/benchratio -num AggregatorCore -den AggregatorCoreLimit -target 1.5
//
// The ratio is of cpu-ns/op (CPU time per trade, steadier than wall clock on a
// shared machine) when every result reports it, else of ns/op.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

func main() {
	num := flag.String("num", "AggregatorCore", "benchmark in the numerator (name without Benchmark and -GOMAXPROCS)")
	den := flag.String("den", "AggregatorCoreLimit", "benchmark in the denominator")
	target := flag.Float64("target", 1.5, "the ratio num/den must be at most this")
	flag.Parse()
	if err := run(os.Stdin, os.Stdout, *num, *den, *target); err != nil {
		fmt.Fprintln(os.Stderr, "benchratio:", err)
		os.Exit(1)
	}
}

// results maps a benchmark's name to its results in input order, each a map
// of unit to value.
type results map[string][]map[string]float64

func parse(r io.Reader) (results, error) {
	res := results{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		m := map[string]float64{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%q: value %q: %w", sc.Text(), f[i], err)
			}
			m[f[i+1]] = v
		}
		res[name] = append(res[name], m)
	}
	return res, sc.Err()
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func run(in io.Reader, out io.Writer, num, den string, target float64) error {
	res, err := parse(in)
	if err != nil {
		return err
	}
	a, b := res[num], res[den]
	if len(a) == 0 || len(b) == 0 {
		return fmt.Errorf("need results of both %s (%d) and %s (%d)", num, len(a), den, len(b))
	}
	unit := "cpu-ns/op"
	for _, m := range slices.Concat(a, b) {
		if _, ok := m[unit]; !ok {
			unit = "ns/op"
		}
	}
	values := func(rs []map[string]float64) ([]float64, error) {
		v := make([]float64, len(rs))
		for i, m := range rs {
			x, ok := m[unit]
			if !ok || x <= 0 {
				return nil, errors.New("a result without " + unit)
			}
			v[i] = x
		}
		return v, nil
	}
	va, err := values(a)
	if err != nil {
		return fmt.Errorf("%s: %w", num, err)
	}
	vb, err := values(b)
	if err != nil {
		return fmt.Errorf("%s: %w", den, err)
	}
	ma, mb := median(va), median(vb)
	fmt.Fprintf(out, "%-24s %s: median %.1f over %d runs (%.1f–%.1f)\n", num, unit, ma, len(va), slices.Min(va), slices.Max(va))
	fmt.Fprintf(out, "%-24s %s: median %.1f over %d runs (%.1f–%.1f)\n", den, unit, mb, len(vb), slices.Min(vb), slices.Max(vb))
	var rounds []string
	for i := range min(len(va), len(vb)) {
		rounds = append(rounds, fmt.Sprintf("%.2f", va[i]/vb[i]))
	}
	fmt.Fprintf(out, "rounds %s / %s: %s×\n", num, den, strings.Join(rounds, " "))
	r := ma / mb
	verdict := "met"
	if r > target {
		verdict = "not met"
	}
	fmt.Fprintf(out, "%s / %s = %.2f× (ratio of the medians), target ≤ %.2f×: %s\n", num, den, r, target, verdict)
	return nil
}
