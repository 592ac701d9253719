package processors

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// TestDataDriven runs the fixtures in testdata/, one file per rule of
// docs/contract.md. Update expectations with -rewrite, then
// review the diff by hand.
//
// Directives:
//
//	config timeframe=1m lateness=0s [gap_fill] [dedupe] [live] [max_future=5s]
//	       [idle_timeout=30s] [max_idle=3m] [zone=Asia/Seoul] [symbols=(A,B)]
//	       [max_bytes=N] [now=HH:MM:SS] [no_qty] [no_id] [key=s time=t price=p qty=q id=i]
//	       [key_check] [rollups=(5m,1h)] [side=x | buyer_maker=m] [revise_within=1h]
//
// A candle prints "tb=… tq=…" (taker buy base and quote volume) when its
// series has a side mapping and "ids=FIRST..LAST" when it has trade ids
// ("-": that one has none); rollup input lines take the same.
//
//	rollup from=1m to=5m [zone=…] [revise_within=1h]
//	trades [now=…]      one record per line; "o=N " sets the offset, "<empty>" is an empty record;
//	                    "k=KEY " sets the record key ("k=<nil>": none), default the key field's value;
//	                    "cancel " / "correct " makes the record a cancel / correction of its id
//	candles             rollup input, one candle per line in the output format
//	                    (a revision ends with "rev=N");
//	                    "quiet KEY TIME" delivers a QuietMark
//	tick now=…          moves the clock and calls Tick
//	watermark | active | state
//	restart             moves the state through Changes → a fresh processor → Restore
func TestDataDriven(t *testing.T) { runDataDriven(t, "testdata/*", 13) }

// TestDataDrivenRevise runs the revision fixtures in testdata/revise/
// (CandleConfig.ReviseWithin).
func TestDataDrivenRevise(t *testing.T) { runDataDriven(t, "testdata/revise/*", 7) }

func runDataDriven(t *testing.T, glob string, want int) {
	files, err := filepath.Glob(glob)
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, path := range files {
		if fi, err := os.Stat(path); err != nil || fi.IsDir() {
			continue // e.g. testdata/fuzz, written by go test -fuzz
		}
		ran++
		t.Run(filepath.Base(path), func(t *testing.T) {
			h := &ddHarness{clock: &testClock{t: baseDay}, st: store{}}
			datadriven.RunTest(t, path, h.run)
		})
	}
	if ran < want {
		t.Fatalf("found %d fixture files in %s, want the %d rule files", ran, glob, want)
	}
}

type ddHarness struct {
	clock  *testClock
	build  func() (processor, error)
	p      processor
	st     store
	offset int64
	from   candle.Timeframe // rollup input timeframe
	// keyField is the aggregator's key field: a trade line without "k=" is
	// sent with that field's value as its record key.
	keyField string
}

// keyOf returns the value of the key field of a JSON trade (nil when the
// record has none), as a producer keying by symbol would send it.
func (h *ddHarness) keyOf(val []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(val, &m) != nil {
		return nil
	}
	raw, ok := m[h.keyField]
	if !ok {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []byte(s)
	}
	return raw // a number: its digits
}

func (h *ddHarness) run(t *testing.T, d *datadriven.TestData) string {
	args := map[string]string{}
	for _, a := range d.CmdArgs {
		args[a.Key] = strings.Join(a.Vals, ",")
	}
	if now, ok := args["now"]; ok {
		tm, err := parseTime(now)
		if err != nil {
			d.Fatalf(t, "now=%s: %v", now, err)
		}
		h.clock.t = tm
	}
	var b strings.Builder
	out := &Output{}
	switch d.Cmd {
	case "config":
		h.build = func() (processor, error) { return h.aggregator(t, d, args) }
		if err := h.reset(t, d); err != nil {
			return "error: " + err.Error()
		}
		return "ok"
	case "rollup":
		loc := zone(t, d, args)
		from, err1 := candle.ParseTimeframe(args["from"], loc)
		to, err2 := candle.ParseTimeframe(args["to"], loc)
		if err1 != nil || err2 != nil {
			d.Fatalf(t, "%v %v", err1, err2)
		}
		var within time.Duration
		if v, ok := args["revise_within"]; ok {
			var err error
			if within, err = time.ParseDuration(v); err != nil {
				d.Fatalf(t, "revise_within=%s: %v", v, err)
			}
		}
		h.from = from
		h.build = func() (processor, error) { return NewRollup(RollupConfig{From: from, To: to, ReviseWithin: within}) }
		if err := h.reset(t, d); err != nil {
			return "error: " + err.Error()
		}
		return "ok"
	case "trades", "candles":
		for _, line := range strings.Split(d.Input, "\n") {
			if line == "" {
				continue
			}
			var key []byte
			explicitKey := false
			action := candle.ActionTrade
			for strings.HasPrefix(line, "o=") || strings.HasPrefix(line, "k=") ||
				strings.HasPrefix(line, "cancel ") || strings.HasPrefix(line, "correct ") {
				if act, rest, _ := strings.Cut(line, " "); act == "cancel" || act == "correct" {
					action, line = candle.ActionCancel, rest
					if act == "correct" {
						action = candle.ActionCorrect
					}
					continue
				}
				tok, rest, _ := strings.Cut(line, " ")
				line = rest
				if strings.HasPrefix(tok, "k=") {
					explicitKey = true
					if tok != "k=<nil>" {
						key = []byte(tok[2:])
					}
					continue
				}
				n, err := strconv.ParseInt(tok[2:], 10, 64)
				if err != nil {
					d.Fatalf(t, "bad offset %q", tok)
				}
				h.offset = n
			}
			val := []byte(line)
			switch {
			case line == "<empty>":
				val = []byte{}
			case d.Cmd == "candles" && strings.HasPrefix(line, "quiet "):
				f := strings.Fields(line)
				r, ok := h.p.(*Rollup)
				if len(f) != 3 || !ok {
					d.Fatalf(t, "quiet line %q: want quiet KEY TIME, for a rollup", line)
				}
				until, err := parseTime(f[2])
				if err != nil {
					d.Fatalf(t, "quiet line %q: %v", line, err)
				}
				out.Reset()
				r.Quiet(QuietMark{Key: f[1], Until: until.UnixMilli()}, out)
				fmtOutput(&b, out)
				continue
			case d.Cmd == "candles" && !strings.HasPrefix(line, "raw "):
				val = h.candleJSON(t, d, line)
			case d.Cmd == "candles":
				val = []byte(strings.TrimPrefix(line, "raw "))
			}
			if !explicitKey && d.Cmd == "trades" {
				key = h.keyOf(val) // a well-behaved producer
			}
			out.Reset()
			if action != candle.ActionTrade {
				a, ok := h.p.(*Aggregator)
				if !ok {
					d.Fatalf(t, "%q needs an aggregator", line)
				}
				a.processAs(Record{Offset: h.offset, Key: key, Value: val}, action, out)
			} else {
				h.p.Process(Record{Offset: h.offset, Key: key, Value: val}, out)
			}
			h.offset++
			fmtOutput(&b, out)
		}
	case "tick":
		h.p.Tick(out)
		fmtOutput(&b, out)
	case "reset-idle":
		h.p.ResetIdle()
	case "watermark":
		a, ok := h.p.(*Aggregator)
		if !ok {
			d.Fatalf(t, "watermark needs an aggregator")
		}
		if w, ok := a.Watermark(); ok {
			fmt.Fprintf(&b, "W=%s\n", time.UnixMilli(w).UTC().Format("2006-01-02T15:04:05.000"))
		} else {
			b.WriteString("no watermark yet\n")
		}
	case "active":
		h.p.Active(func(c *candle.Candle) { fmt.Fprintf(&b, "active %s\n", fmtCandle(c)) })
	case "state":
		keys := make([]string, 0, len(h.st))
		for k := range h.st {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "entry %s\n", fmtEntry(k, h.st[k]))
		}
		if len(keys) == 0 {
			b.WriteString("no state\n")
		}
	case "restart":
		p, err := h.build()
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		h.st.restoreInto(t, p, nil)
		h.p = p
		fmt.Fprintf(&b, "restored %d entries\n", len(h.st))
	default:
		d.Fatalf(t, "unknown directive %q", d.Cmd)
	}
	h.st.apply(h.p)
	if b.Len() == 0 {
		return "(nothing)"
	}
	return b.String()
}

func (h *ddHarness) reset(t *testing.T, d *datadriven.TestData) error {
	p, err := h.build()
	if err != nil {
		return err
	}
	h.p, h.st, h.offset = p, store{}, 0
	return nil
}

func zone(t *testing.T, d *datadriven.TestData, args map[string]string) *time.Location {
	z, ok := args["zone"]
	if !ok {
		return nil
	}
	loc, err := time.LoadLocation(z)
	if err != nil {
		d.Fatalf(t, "zone %q: %v", z, err)
	}
	return loc
}

func (h *ddHarness) aggregator(t *testing.T, d *datadriven.TestData, args map[string]string) (processor, error) {
	tf, err := candle.ParseTimeframe(args["timeframe"], zone(t, d, args))
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	dur := func(name string) time.Duration {
		s, ok := args[name]
		if !ok {
			return 0
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			d.Fatalf(t, "%s=%s: %v", name, s, err)
		}
		return v
	}
	flag := func(name string) bool { _, ok := args[name]; return ok }
	field := func(name, def string) string {
		if v, ok := args[name]; ok {
			return v
		}
		return def
	}
	f := Fields{Key: field("key", "s"), Time: field("time", "t"), Price: field("price", "p"),
		Qty: field("qty", "q"), ID: field("id", "i")}
	if flag("no_qty") {
		f.Qty = ""
	}
	if flag("no_id") {
		f.ID = ""
	}
	f.Side, f.BuyerMaker = args["side"], args["buyer_maker"]
	dc := DecoderConfig{Fields: f}
	if s, ok := args["symbols"]; ok {
		dc.Symbols = strings.Split(s, ",")
	}
	if s, ok := args["max_bytes"]; ok {
		if dc.MaxRecordBytes, err = strconv.Atoi(s); err != nil {
			d.Fatalf(t, "max_bytes: %v", err)
		}
	}
	dc.KeyCheck = flag("key_check")
	var rollups []candle.Timeframe
	if s, ok := args["rollups"]; ok {
		for _, r := range strings.Split(s, ",") {
			rtf, err := candle.ParseTimeframe(r, zone(t, d, args))
			if err != nil {
				d.Fatalf(t, "rollups: %v", err)
			}
			rollups = append(rollups, rtf)
		}
	}
	h.keyField = f.Key
	dec, err := NewDecoder(dc)
	if err != nil {
		return nil, err
	}
	return NewAggregator(CandleConfig{Timeframe: tf, Lateness: dur("lateness"), IdleTimeout: dur("idle_timeout"),
		MaxFuture: dur("max_future"), MaxIdle: dur("max_idle"), Dedupe: flag("dedupe"), GapFill: flag("gap_fill"),
		Live: flag("live"), Decoder: dec, Rollups: rollups, ReviseWithin: dur("revise_within")}, h.clock)
}

// candleJSON turns a line in the output format into a sub-candle record.
func (h *ddHarness) candleJSON(t *testing.T, d *datadriven.TestData, line string) []byte {
	f := strings.Fields(line)
	if len(f) < 3 {
		d.Fatalf(t, "candle line %q: want SYMBOL TF TIME o=… h=… l=… c=… v=… q=… n=… [gap]", line)
	}
	open, err := parseTime(f[2])
	if err != nil {
		d.Fatalf(t, "candle line %q: %v", line, err)
	}
	c := candle.Candle{Symbol: f[0], Timeframe: f[1], OpenTime: open.UnixMilli()}
	c.CloseTime = h.from.End(c.OpenTime)
	for _, kv := range f[3:] {
		k, v, _ := strings.Cut(kv, "=")
		dec := func() decimal.Decimal {
			x, err := decimal.Parse([]byte(v))
			if err != nil {
				d.Fatalf(t, "candle line %q: %s: %v", line, kv, err)
			}
			return x
		}
		sum := func() decimal.Sum {
			x, err := decimal.ParseSum([]byte(v))
			if err != nil {
				d.Fatalf(t, "candle line %q: %s: %v", line, kv, err)
			}
			return x
		}
		switch k {
		case "o":
			c.Open = dec()
		case "h":
			c.High = dec()
		case "l":
			c.Low = dec()
		case "c":
			c.Close = dec()
		case "v":
			c.Volume = sum()
		case "q":
			c.QuoteVolume = sum()
		case "n":
			c.Trades, _ = strconv.ParseInt(v, 10, 64)
		case "tb":
			c.Taker, c.TakerBuyVolume = true, sum()
		case "tq":
			c.Taker, c.TakerBuyQuoteVolume = true, sum()
		case "ids":
			c.FirstTradeID, c.LastTradeID, _ = strings.Cut(v, "..")
			c.FirstTradeID = strings.TrimPrefix(c.FirstTradeID, "-") // "-": none
			c.LastTradeID = strings.TrimPrefix(c.LastTradeID, "-")
		case "gap":
			c.Gap = true
		case "rev":
			r, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				d.Fatalf(t, "candle line %q: %s: %v", line, kv, err)
			}
			c.Rev = uint32(r)
		}
	}
	return c.AppendJSON(nil)
}

// fmtEntry prints a state entry key readably: p, k BTC, i BTC 10:01:00 #0 (2 ids).
func fmtEntry(key string, val []byte) string {
	switch key[0] {
	case entryPartition:
		return "p"
	case entryKey:
		return "k " + key[1:]
	case entryKept:
		r := reader{b: []byte(key[1:])}
		name := r.bytes(r.uvarint())
		return fmt.Sprintf("r %s %s", name, fmtTime(r.varint()))
	case entryTrades:
		r := reader{b: []byte(key[1:])}
		name := r.bytes(r.uvarint())
		open, seq := r.varint(), r.uvarint()
		return fmt.Sprintf("t %s %s #%d", name, fmtTime(open), seq)
	case rollWinEntry:
		name, op, _ := parseRollEntryKey([]byte(key))
		return fmt.Sprintf("w %s %s", name, fmtTime(op.win))
	case rollSubEntry:
		name, op, _ := parseRollEntryKey([]byte(key))
		return fmt.Sprintf("s %s %s %s", name, fmtTime(op.win), fmtTime(op.sub))
	case entryIDs:
		r := reader{b: []byte(key[1:])}
		name := r.bytes(r.uvarint())
		open, seq := r.varint(), r.uvarint()
		ids := 0
		for v := (reader{b: val}); len(v.b) > 0 && v.err == nil; ids++ {
			v.bytes(v.uvarint())
		}
		return fmt.Sprintf("i %s %s #%d (%d ids)", name, fmtTime(open), seq, ids)
	}
	return fmt.Sprintf("%q", key)
}
