package processors

import (
	"crypto/md5"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
)

// reshardCase is one processor kind under a split and a merge: records in
// three phases (keyed by their partition key), and what every processor
// does at the end of a phase (let time pass, for silence).
type reshardCase struct {
	name   string
	r      Resharder
	newP   func(t *testing.T) Processor
	phases [3][]Record
	end    func(p Processor, phase int, out *Output)
}

// Split a parent's state into two children and merge them back: the
// parent alone and the parent, then the two children, then the merged
// child, produce the same output from the same records, whatever the kind.
func TestReshardSplitMergeEqualsOneProcessor(t *testing.T) {
	for _, c := range []reshardCase{candleCase(t, 0), candleCase(t, time.Minute), multiMetricCase(t), silenceCase(t)} {
		t.Run(c.name, func(t *testing.T) { c.run(t) })
	}
}

// owns splits keys between two children by hash (one child owns the keys
// where it is true, the other the rest).
func owns(key string) bool {
	sum := md5.Sum([]byte(key)) // as Kinesis hashes partition keys
	return sum[0] < 128
}

func (c reshardCase) run(t *testing.T) {
	ref := c.newP(t)
	var want, got Output
	for ph, recs := range c.phases {
		for _, r := range recs {
			ref.Process(r, &want)
		}
		if c.end != nil {
			c.end(ref, ph, &want)
		}
	}

	parent := c.newP(t)
	for _, r := range c.phases[0] {
		parent.Process(r, &got)
	}
	if c.end != nil {
		c.end(parent, 0, &got)
	}
	parentState := stateOf(parent, nil)

	// Split: each child gets the keys it owns and the partition-wide state.
	var children [2]Processor
	var childState [2]map[string][]byte
	for i, side := range [2]bool{true, false} {
		entries, conflicts, err := HandOver(c.r, []map[string][]byte{parentState}, func(k string) bool { return owns(k) == side })
		if err != nil || len(conflicts) > 0 {
			t.Fatalf("split: %v %v", err, conflicts)
		}
		children[i], childState[i] = restored(t, c.newP(t), entries), entries
	}
	seen := [2]int{}
	for _, r := range c.phases[1] {
		i := 1
		if owns(string(r.Key)) {
			i = 0
		}
		seen[i]++
		children[i].Process(r, &got)
	}
	if seen[0] == 0 || seen[1] == 0 {
		t.Fatalf("records per child %v: the test's keys do not split", seen)
	}
	for i, ch := range children {
		if c.end != nil {
			c.end(ch, 1, &got)
		}
		childState[i] = stateOf(ch, childState[i])
	}

	// Merge: one child continues both.
	entries, conflicts, err := HandOver(c.r, childState[:], func(string) bool { return true })
	if err != nil || len(conflicts) > 0 {
		t.Fatalf("merge: %v %v", err, conflicts)
	}
	merged := restored(t, c.newP(t), entries)
	for _, r := range c.phases[2] {
		merged.Process(r, &got)
	}
	if c.end != nil {
		c.end(merged, 2, &got)
	}
	w, g := outputLines(&want), outputLines(&got)
	if len(w) < 20 {
		t.Fatalf("only %d outputs: the case tests too little", len(w))
	}
	if !slices.Equal(w, g) {
		t.Fatalf("split and merged output differs from one processor's:\nwant %d: %s\ngot  %d: %s",
			len(w), strings.Join(w, "\n      "), len(g), strings.Join(g, "\n      "))
	}
}

// stateOf applies p's changes to entries (a new map when nil): p's whole
// state when entries held what it was restored from.
func stateOf(p Processor, entries map[string][]byte) map[string][]byte {
	if entries == nil {
		entries = map[string][]byte{}
	}
	entries = maps.Clone(entries)
	p.Changes(func(k, v []byte) {
		if v == nil {
			delete(entries, string(k))
		} else {
			entries[string(k)] = append([]byte(nil), v...)
		}
	})
	return entries
}

func restored(t *testing.T, p Processor, entries map[string][]byte) Processor {
	t.Helper()
	for k, v := range entries {
		if err := p.Restore([]byte(k), v); err != nil {
			t.Fatalf("restore %q: %v", k, err)
		}
	}
	return p
}

// outputLines is out as sorted lines: a split changes when a key's output
// comes (a child's watermark lags its parent's), never what it is.
func outputLines(out *Output) []string {
	var lines []string
	for i := range out.Candles {
		lines = append(lines, "candle "+string(out.Candles[i].AppendJSON(nil)))
	}
	for _, e := range out.Events {
		lines = append(lines, "event "+string(e.Value))
	}
	for _, r := range out.Rejected {
		lines = append(lines, fmt.Sprintf("rejected %s %s %d", r.Reason, r.Key, r.Offset))
	}
	slices.Sort(lines)
	return lines
}

// candleCase is the candles kind; with a revision horizon, one record in
// 13 is 25 s late (a revision, across the split and merge too).
func candleCase(t *testing.T, horizon time.Duration) reshardCase {
	tf, _ := candle.ParseTimeframe("10s", nil)
	name := "candles"
	if horizon > 0 {
		name = "candles with revisions"
	}
	c := reshardCase{name: name, r: CandleResharder{}, newP: func(t *testing.T) Processor {
		dec, err := NewDecoder(DecoderConfig{Fields: Fields{Key: "symbol", Time: "ts", Price: "price", Qty: "qty", ID: "id"}})
		if err != nil {
			t.Fatal(err)
		}
		a, err := NewAggregator(CandleConfig{Timeframe: tf, Lateness: time.Second, Dedupe: true, GapFill: true, Decoder: dec,
			ReviseWithin: horizon}, FixedClock{})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}}
	syms := []string{"BTC", "ETH", "SOL", "ADA", "DOT", "XRP", "BNB", "LINK"}
	n := 0
	for ph, span := range [3][2]int{{0, 60}, {60, 130}, {130, 200}} {
		for sec := span[0]; sec < span[1]; sec++ {
			sym := syms[(sec*7)%len(syms)]
			if sec%11 == 0 && sec > span[0] {
				n-- // a duplicate id: the previous trade again
			}
			ts := int64(sec)*1000 + int64(sec%3)*100
			if horizon > 0 && sec%13 == 0 && sec > 25 {
				ts -= 25000
			}
			c.phases[ph] = append(c.phases[ph], Record{Offset: int64(n), Key: []byte(sym),
				Value: fmt.Appendf(nil, `{"symbol":%q,"ts":%d,"price":"%d.5","qty":"2","id":%d}`, sym, ts, 100+sec%17, n)})
			n++
		}
	}
	return c
}

func multiMetricCase(t *testing.T) reshardCase {
	tf, _ := candle.ParseTimeframe("10s", nil)
	c := reshardCase{name: "multi-metric", r: CandleResharder{Metrics: true}, newP: func(t *testing.T) Processor {
		m, err := NewMultiMetric(MetricsConfig{Key: "device", Time: "ts", Values: []string{"temperature", "humidity"}},
			CandleConfig{Timeframe: tf, Lateness: time.Second, GapFill: true}, FixedClock{})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}}
	for ph, span := range [3][2]int{{0, 60}, {60, 130}, {130, 200}} {
		for sec := span[0]; sec < span[1]; sec++ {
			dev := fmt.Sprintf("dev-%03d", sec%9)
			if sec%9 < 4 && sec > 20 && sec < 190 {
				continue // silent across the split and the merge: gap candles
			}
			if ph == 1 && sec > 90 && owns(dev) {
				continue // one child falls quiet: the children's watermarks differ at the merge
			}
			hum := fmt.Sprintf(`,"humidity":%d`, 40+sec%5)
			if sec%4 == 0 {
				hum = "" // this reading has one metric only
			}
			c.phases[ph] = append(c.phases[ph], Record{Offset: int64(sec), Key: []byte(dev),
				Value: fmt.Appendf(nil, `{"device":%q,"ts":%d,"temperature":"2%d.%d"%s}`, dev, int64(sec)*1000, sec%10, sec%7, hum)})
		}
	}
	return c
}

// silenceCase: 50 devices, levels 10s/20s/30s, split while timers of every
// level are pending and merged while others are, each batch of readings
// ingested at one time.
func silenceCase(t *testing.T) reshardCase {
	levels := []SilenceLevel{{Name: "l10", After: 10 * time.Second, Action: "status"},
		{Name: "l20", After: 20 * time.Second, Action: "alert"}, {Name: "l30", After: 30 * time.Second, Action: "alert"}}
	c := reshardCase{name: "silence", r: SilenceResharder{}, newP: func(t *testing.T) Processor {
		s, err := NewSilence(SilenceConfig{Levels: levels, Key: "device", Time: "ts", Carry: []string{"owner"}}, FixedClock{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}}
	off := int64(0)
	batch := func(ph int, sec int64, from, to int) {
		for d := from; d < to; d++ {
			dev := fmt.Sprintf("dev-%03d", d)
			c.phases[ph] = append(c.phases[ph], Record{Offset: off, Key: []byte(dev), Timestamp: sec * 1000,
				Value: fmt.Appendf(nil, `{"device":%q,"ts":%d,"owner":"o%d"}`, dev, sec*1000-200, d%3)})
			off++
		}
	}
	batch(0, 0, 0, 50)
	batch(0, 5, 0, 25)
	batch(1, 13, 0, 10)  // 25..29 were fired l10 at 12s: recovered
	batch(1, 13, 25, 30) //
	batch(2, 36, 40, 45) // fired up to l30 by then
	batch(2, 61, 0, 50)  // every device is back
	advance := [3][]int64{{12}, {22}, {25, 35, 50, 100}}
	c.end = func(p Processor, ph int, out *Output) {
		for _, sec := range advance[ph] {
			p.(*Silence).AdvanceTo(sec*1000, out)
		}
	}
	return c
}

// Splitting a parent's entries and merging them straight back gives the
// parent's entries, for every built-in kind: no entry is lost, doubled or
// changed.
func TestReshardSplitThenMergeKeepsEveryEntry(t *testing.T) {
	for _, c := range []reshardCase{candleCase(t, 0), candleCase(t, time.Minute), multiMetricCase(t), silenceCase(t)} {
		t.Run(c.name, func(t *testing.T) {
			p := c.newP(t)
			var out Output
			for _, r := range c.phases[0] {
				p.Process(r, &out)
			}
			checkSplitMerge(t, c.r, stateOf(p, nil))
		})
	}
	t.Run("rollup", func(t *testing.T) {
		r, err := NewRollup(RollupConfig{From: candle.Timeframe{N: 1, Unit: candle.Minute}, To: candle.Timeframe{N: 5, Unit: candle.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		a, err := NewAggregator(CandleConfig{Timeframe: candle.Timeframe{N: 1, Unit: candle.Minute}, Decoder: mustDecoder(t)}, FixedClock{})
		if err != nil {
			t.Fatal(err)
		}
		var trades, out Output
		for i, sym := range []string{"A", "B", "C", "D", "E", "F", "A"} {
			a.Process(Record{Value: fmt.Appendf(nil, `{"symbol":%q,"ts":%d,"price":"1","qty":"1"}`, sym, int64(i)*90_000)}, &trades)
		}
		if len(trades.Candles) < 6 {
			t.Fatalf("%d candles", len(trades.Candles))
		}
		for i := range trades.Candles {
			c := &trades.Candles[i]
			r.Process(Record{Key: []byte(c.Symbol), Value: c.AppendJSON(nil)}, &out)
		}
		checkSplitMerge(t, RollupResharder{}, stateOf(r, nil))
	})
}

func checkSplitMerge(t *testing.T, r Resharder, parent map[string][]byte) {
	t.Helper()
	if len(parent) < 6 {
		t.Fatalf("only %d entries", len(parent))
	}
	a, _, err := HandOver(r, []map[string][]byte{parent}, owns)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := HandOver(r, []map[string][]byte{parent}, func(k string) bool { return !owns(k) })
	if err != nil {
		t.Fatal(err)
	}
	if len(a) == 0 || len(b) == 0 {
		t.Fatalf("children of %d and %d entries", len(a), len(b))
	}
	back, _, err := HandOver(r, []map[string][]byte{a, b}, func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(parent, back, func(x, y []byte) bool { return string(x) == string(y) }) {
		t.Fatalf("split and merged back: %d entries, the parent had %d", len(back), len(parent))
	}
}

// A multi-metric series belongs to its device's record: both metrics of a
// device go to the child that owns the device.
func TestCandleResharderRoutesSeriesByDevice(t *testing.T) {
	for _, entry := range []string{"kdev-7#temperature", "kdev-7#humidity"} {
		key, ok, err := CandleResharder{Metrics: true}.EntryKey([]byte(entry))
		if err != nil || !ok || key != "dev-7" {
			t.Fatalf("%s: key %q %v %v", entry, key, ok, err)
		}
	}
	if _, _, err := (CandleResharder{Metrics: true}).EntryKey([]byte("kdev-7")); err == nil {
		t.Fatal("a series without a metric accepted")
	}
}

// A silence device's entry and its pending timer name the device; the
// ingestion clock is partition-wide and merges to the latest.
func TestSilenceResharderEntries(t *testing.T) {
	r := SilenceResharder{}
	for _, entry := range [][]byte{[]byte("ddev-035"), timerKey(12345, "dev-035")} {
		key, ok, err := r.EntryKey(entry)
		if err != nil || !ok || key != "dev-035" {
			t.Fatalf("%q: key %q %v %v", entry, key, ok, err)
		}
	}
	if _, ok, err := r.EntryKey(silenceClockKey); ok || err != nil {
		t.Fatal("the clock belongs to a key", err)
	}
	if _, _, err := r.EntryKey([]byte("p")); err == nil {
		t.Fatal("a candle entry accepted")
	}
	clock := func(ms int64) []byte {
		s, _ := NewSilence(SilenceConfig{Levels: shippedLevels, Key: "d", Time: "t"}, FixedClock{})
		return clockEntry(s, ms)
	}
	v, err := r.MergePartition(silenceClockKey, [][]byte{clock(5000), clock(9000), clock(7000)})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := NewSilence(SilenceConfig{Levels: shippedLevels, Key: "d", Time: "t"}, FixedClock{})
	if err := s.Restore(silenceClockKey, v); err != nil {
		t.Fatal(err)
	}
	if c, ok := s.IngestClock(); !ok || c != 9000 {
		t.Fatalf("merged clock %d %v, want 9000", c, ok)
	}
}

// clockEntry is the clock entry of s with its clock at ms.
func clockEntry(s *Silence, ms int64) []byte {
	var out Output
	s.AdvanceTo(ms, &out)
	var v []byte
	s.Changes(func(k, val []byte) {
		if string(k) == string(silenceClockKey) {
			v = append([]byte(nil), val...)
		}
	})
	return v
}

// The partition entry merges to the latest max event time (the watermark
// never goes back); a candle kind refuses another kind's entries.
func TestCandleMergePartitionTakesTheLatest(t *testing.T) {
	mk := func(maxTS int64) []byte {
		a, _ := NewAggregator(CandleConfig{Timeframe: candle.Timeframe{N: 1, Unit: candle.Minute}, Decoder: mustDecoder(t)}, FixedClock{})
		var out Output
		a.Process(Record{Value: fmt.Appendf(nil, `{"symbol":"K","ts":%d,"price":"1","qty":"1"}`, maxTS)}, &out)
		var p []byte
		a.Changes(func(k, v []byte) {
			if k[0] == entryPartition {
				p = append([]byte(nil), v...)
			}
		})
		return p
	}
	part := []byte{entryPartition}
	merged, err := CandleResharder{}.MergePartition(part, [][]byte{mk(5000), nil, mk(9000), mk(7000)})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := NewAggregator(CandleConfig{Timeframe: candle.Timeframe{N: 1, Unit: candle.Minute}, Decoder: mustDecoder(t)}, FixedClock{})
	if err := a.Restore(part, merged); err != nil {
		t.Fatal(err)
	}
	if w, ok := a.Watermark(); !ok || w != 9000 {
		t.Fatalf("watermark %d %v, want 9000", w, ok)
	}
	// A parent whose lateness was raised keeps its watermark above its max
	// event time less the lateness: the child takes the highest watermark,
	// not one derived from the max event time.
	agg := func(lateness time.Duration) *Aggregator {
		a, _ := NewAggregator(CandleConfig{Timeframe: candle.Timeframe{N: 1, Unit: candle.Minute}, Lateness: lateness, Decoder: mustDecoder(t)}, FixedClock{})
		return a
	}
	first := agg(0)
	var out Output
	first.Process(Record{Value: []byte(`{"symbol":"K","ts":9500,"price":"1","qty":"1"}`)}, &out)
	st := store{}
	st.apply(first)
	raised := agg(5 * time.Second)
	st.restoreInto(t, raised, nil)
	raised.Process(Record{Value: []byte(`{"symbol":"K","ts":9600,"price":"1","qty":"1"}`)}, &out)
	st.apply(raised)
	merged, err = CandleResharder{}.MergePartition(part, [][]byte{mk(9000), st[string(part)]})
	if err != nil {
		t.Fatal(err)
	}
	child := agg(5 * time.Second)
	if err := child.Restore(part, merged); err != nil {
		t.Fatal(err)
	}
	if w, _ := child.Watermark(); w != 9500 {
		t.Fatalf("child watermark %d, want 9500 (the raised parent's)", w)
	}
	if m, err := (CandleResharder{}).MergePartition(part, [][]byte{nil, nil}); m != nil || err != nil {
		t.Fatal(m, err)
	}
	if _, err := (CandleResharder{}).MergePartition(part, [][]byte{{9}}); err == nil {
		t.Fatal("corrupt entry accepted")
	}
	for _, entry := range []string{"ddev-035", "I"} {
		if _, _, err := (CandleResharder{}).EntryKey([]byte(entry)); err == nil {
			t.Fatalf("silence entry %q accepted as a candle entry", entry)
		}
	}
}

// A key with state in two parents (its records came under other partition
// keys) keeps the first parent's entries, all of them, and is reported.
func TestHandOverConflictKeepsFirstParent(t *testing.T) {
	p1 := map[string][]byte{"ddev-1": {1}, string(timerKey(10, "dev-1")): {1}}
	p2 := map[string][]byte{"ddev-1": {2}, string(timerKey(20, "dev-1")): {1}, "ddev-2": {3}}
	got, conflicts, err := HandOver(SilenceResharder{}, []map[string][]byte{p1, p2}, func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{"ddev-1": {1}, string(timerKey(10, "dev-1")): {1}, "ddev-2": {3}}
	if !maps.EqualFunc(got, want, func(x, y []byte) bool { return string(x) == string(y) }) || !slices.Equal(conflicts, []string{"dev-1"}) {
		t.Fatalf("got %q, conflicts %v", got, conflicts)
	}
}

func mustDecoder(t *testing.T) *Decoder {
	d, err := NewDecoder(DecoderConfig{Fields: Fields{Key: "symbol", Time: "ts", Price: "price", Qty: "qty"}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}
