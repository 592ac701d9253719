package processors

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
)

// A shard split hands a child only the keys it owns plus the partition
// entry: continuing the child with its keys' trades gives exactly the
// candles the parent would have given for those keys.
func TestHandoffCarriesOwnedKeys(t *testing.T) {
	tf, _ := candle.ParseTimeframe("1m", nil)
	newAgg := func() *Aggregator {
		dec, err := NewDecoder(DecoderConfig{Fields: Fields{Key: "symbol", Time: "ts", Price: "price", Qty: "qty", ID: "id"}})
		if err != nil {
			t.Fatal(err)
		}
		a, err := NewAggregator(CandleConfig{Timeframe: tf, Lateness: time.Second, Dedupe: true, GapFill: true, Decoder: dec}, FixedClock{})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	rec := func(i int, sym string, sec int, price string) Record {
		return Record{Offset: int64(i), Value: fmt.Appendf(nil, `{"symbol":%q,"ts":%d,"price":%q,"qty":"1","id":%d}`, sym, int64(sec)*1000, price, i)}
	}
	parent := newAgg()
	var out Output
	i := 0
	for sec := 0; sec < 150; sec += 10 { // both keys trade; windows 0:00 and 0:01 close, 0:02 stays open
		parent.Process(rec(i, "X", sec, fmt.Sprint(100+sec)), &out)
		parent.Process(rec(i+1, "Y", sec+1, fmt.Sprint(200+sec)), &out)
		i += 2
	}
	entries := map[string][]byte{}
	parent.Changes(func(k, v []byte) { entries[string(k)] = append([]byte(nil), v...) })

	child := newAgg()
	var parts [][]byte
	for k, v := range entries {
		key, isKey, err := EntryKey([]byte(k))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case !isKey:
			parts = append(parts, v)
		case key == "X":
			if err := child.Restore([]byte(k), v); err != nil {
				t.Fatal(err)
			}
		case key != "Y":
			t.Fatalf("entry %q belongs to unknown key %q", k, key)
		}
	}
	merged, err := MergePartition(parts...)
	if err != nil || merged == nil {
		t.Fatal(merged, err)
	}
	if err := child.Restore(PartitionEntry, merged); err != nil {
		t.Fatal(err)
	}
	// Only X trades continue (Y moved to the other child): both must agree.
	var fromParent, fromChild Output
	for sec := 150; sec < 400; sec += 7 {
		r := rec(i, "X", sec, fmt.Sprint(300+sec))
		parent.Process(r, &fromParent)
		child.Process(r, &fromChild)
		i++
	}
	var parentX []candle.Candle // the parent still holds Y and gap-fills it
	for _, c := range fromParent.Candles {
		if c.Symbol == "X" {
			parentX = append(parentX, c)
		}
	}
	if len(fromChild.Candles) < 3 || !reflect.DeepEqual(parentX, fromChild.Candles) {
		t.Fatalf("child candles differ:\nparent %+v\nchild  %+v", parentX, fromChild.Candles)
	}
	// The child's watermark continues the parent's.
	pw, _ := parent.Watermark()
	cw, _ := child.Watermark()
	if pw != cw {
		t.Fatalf("watermark %d vs %d", pw, cw)
	}
}

func TestMergePartitionTakesTheLatest(t *testing.T) {
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
	merged, err := MergePartition(mk(5000), nil, mk(9000), mk(7000))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := NewAggregator(CandleConfig{Timeframe: candle.Timeframe{N: 1, Unit: candle.Minute}, Decoder: mustDecoder(t)}, FixedClock{})
	if err := a.Restore(PartitionEntry, merged); err != nil {
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
	merged, err = MergePartition(mk(9000), st[string(PartitionEntry)])
	if err != nil {
		t.Fatal(err)
	}
	child := agg(5 * time.Second)
	if err := child.Restore(PartitionEntry, merged); err != nil {
		t.Fatal(err)
	}
	if w, _ := child.Watermark(); w != 9500 {
		t.Fatalf("child watermark %d, want 9500 (the raised parent's)", w)
	}
	if m, err := MergePartition(nil, nil); m != nil || err != nil {
		t.Fatal(m, err)
	}
	if _, err := MergePartition([]byte{9}); err == nil {
		t.Fatal("corrupt entry accepted")
	}
}

func mustDecoder(t *testing.T) *Decoder {
	d, err := NewDecoder(DecoderConfig{Fields: Fields{Key: "symbol", Time: "ts", Price: "price", Qty: "qty"}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}
