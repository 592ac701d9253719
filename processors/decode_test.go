package processors

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kandle/kandle/candle"
)

var decodeSeeds = []string{
	`{"s":"BTC","t":1704103200000,"p":"1.5","q":"2","i":7}`,
	`{"s":"B\u0054C","t":"2024-01-01T10:00:00Z","p":1.5,"q":2e-3,"i":"x\"y"}`,
	`{"data":{"s":"BTC","T":1,"p":"1"},"x":[1,2,{"a":null}],"y":true,"z":-0.5e+3}`,
	` {"s" : "BTC" , "t" : 1 , "p" : "1" , "q" : "1" } `,
	`[1,2,3]`, `"str"`, `12`, `null`, `{}`, `{"a":[]}`, `{"a":{}}`, `{"s":"\ud83d\ude00"}`,
	`{"s":"BTC","t":1704103200000,"i":7,"act":"cancel"}`,
	`{"s":"BTC","t":1704103200000,"p":"2.5","q":"1","i":"7","act":"Correction"}`,
	`{"s":"BTC","t":1704103200000,"p":"2.5","q":"1","i":8,"act":"c\u0061ncel"}`,
}

// checkDecode is the decoder's contract on arbitrary bytes: no panic, and a
// record is rejected as malformed_json exactly when encoding/json says it is
// not valid JSON (and as not_object exactly when it is valid but not an object).
func checkDecode(t *testing.T, d *Decoder, in []byte) {
	t.Helper()
	var tr candle.Trade
	rej, ok := d.Decode(in, &tr)
	valid := json.Valid(in)
	switch {
	case !valid && (ok || rej.Reason != ReasonMalformedJSON):
		t.Fatalf("%q is not valid JSON but Decode said ok=%v reason=%s", in, ok, rej.Reason)
	case valid && rej.Reason == ReasonMalformedJSON:
		t.Fatalf("%q is valid JSON but Decode said malformed: %s", in, rej.Detail)
	case valid && !ok && rej.Reason == ReasonNotObject:
		if trimmed := bytes.TrimLeft(in, " \t\r\n"); trimmed[0] == '{' {
			t.Fatalf("%q is an object but Decode said not_object", in)
		}
	}
	switch {
	case !ok:
	case tr.Action == candle.ActionCancel:
		// A cancel reads no price or qty; it names its trade.
		if tr.Key == "" || tr.ID == "" || tr.Price.Sign() != 0 || tr.Qty.Sign() != 0 {
			t.Fatalf("%q accepted with an invalid cancel %+v", in, tr)
		}
	case tr.Key == "" || tr.Price.Sign() <= 0 || tr.Qty.Sign() <= 0 || (tr.Action == candle.ActionCorrect && tr.ID == ""):
		t.Fatalf("%q accepted with an invalid trade %+v", in, tr)
	}
}

// testDecoder maps every field, an action ("act") included, so the fuzz
// and mutation tests also reach cancels and corrections.
func testDecoder(t testing.TB) *Decoder {
	d, err := NewDecoder(DecoderConfig{Fields: Fields{Key: "s", Time: "t", Price: "p", Qty: "q", ID: "i", Action: "act"}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDecodeAgreesWithEncodingJSON mutates valid records at random (byte
// flips, cuts, insertions of JSON punctuation) and checks the scanner's
// verdict against encoding/json on every one.
func TestDecodeAgreesWithEncodingJSON(t *testing.T) {
	d := testDecoder(t)
	rng := rand.New(rand.NewPCG(3, 4))
	const alphabet = "{}[]\":,.-+eE0123456789 \\/ubfnrtTx\x00\x1f\xff"
	malformed := 0
	for i := range 200000 {
		in := []byte(decodeSeeds[i%len(decodeSeeds)])
		for range 1 + rng.IntN(3) {
			if len(in) == 0 {
				break
			}
			p := rng.IntN(len(in))
			switch rng.IntN(3) {
			case 0:
				in[p] = alphabet[rng.IntN(len(alphabet))]
			case 1:
				in = in[:p]
			case 2:
				in = append(in[:p], append([]byte{alphabet[rng.IntN(len(alphabet))]}, in[p:]...)...)
			}
		}
		if !json.Valid(in) {
			malformed++
		}
		checkDecode(t, d, in)
	}
	if malformed < 1000 {
		t.Fatalf("only %d malformed inputs generated: the mutation is too weak", malformed)
	}
}

// FuzzDecode: go test -fuzz FuzzDecode ./processors
func FuzzDecode(f *testing.F) {
	for _, s := range append(decodeSeeds, shapeBases...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		d := testDecoder(t)
		checkDecode(t, d, in)
		// The shape cache: whatever shape it holds (in's own, once learned,
		// or a base's), in decodes as the general scanner alone decodes it.
		general := testDecoder(t)
		general.noShape = true
		want := decodeResult(general, in)
		if got := decodeResult(d, in); got != want {
			t.Fatalf("%q after itself: cached %s, general %s", in, got, want)
		}
		for _, base := range shapeBases {
			decodeResult(d, []byte(base))
			if got := decodeResult(d, in); got != want {
				t.Fatalf("%q after %s: cached %s, general %s", in, base, got, want)
			}
		}
	})
}

func TestDecoderConfigErrors(t *testing.T) {
	for _, f := range []Fields{
		{Time: "t", Price: "p"},
		{Key: "s", Time: "t", Price: "s"},
		{Key: "a.b", Time: "a", Price: "p"},
		{Key: "a..b", Time: "t", Price: "p"},
	} {
		if _, err := NewDecoder(DecoderConfig{Fields: f}); err == nil {
			t.Errorf("fields %+v: want an error", f)
		}
	}
}

// The aggressor side comes from one field: a decoder with both refuses to build.
func TestDecoderOneSideField(t *testing.T) {
	_, err := NewDecoder(DecoderConfig{Fields: Fields{Key: "s", Time: "t", Price: "p", Side: "side", BuyerMaker: "m"}})
	if err == nil {
		t.Fatal("NewDecoder accepted both fields.side and fields.buyer_maker")
	}
	for _, f := range []Fields{{Key: "s", Time: "t", Price: "p"}, {Key: "s", Time: "t", Price: "p", Side: "side"}, {Key: "s", Time: "t", Price: "p", BuyerMaker: "m"}} {
		d, err := NewDecoder(DecoderConfig{Fields: f})
		if err != nil || d.HasSide() != (f.Side != "" || f.BuyerMaker != "") {
			t.Fatalf("%+v: HasSide %v, %v", f, d != nil && d.HasSide(), err)
		}
	}
}

// TestDecodeAction: the action field's accepted values (any letter case,
// escapes resolved), what a cancel and a correction need, and the rejections
// of everything else. Each record is decoded by a fresh decoder and by one
// that has seen every record before it (its shape cache holding the
// previous layout): both must give the same answer.
func TestDecodeAction(t *testing.T) {
	fields := Fields{Key: "s", Time: "t", Price: "p", Qty: "q", ID: "i", Side: "side", Action: "act"}
	const (
		trade   = candle.ActionTrade
		cancel  = candle.ActionCancel
		correct = candle.ActionCorrect
	)
	seen := newActionTestDecoder(t, fields)
	for _, tc := range []struct {
		in     string
		action candle.Action
		reason Reason // "" when accepted
		detail string // part of the rejection's detail
	}{
		// Trades: no field, null, or a trade's own words.
		{`{"s":"BTC","t":1,"p":"2","q":"3","i":1,"side":"buy"}`, trade, "", ""},
		{`{"s":"BTC","t":1,"p":"2","q":"3","i":1,"side":"buy","act":null}`, trade, "", ""},
		{`{"s":"BTC","t":1,"p":"2","q":"3","i":1,"side":"buy","act":"trade"}`, trade, "", ""},
		{`{"s":"BTC","t":1,"p":"2","q":"3","side":"buy","act":"NEW"}`, trade, "", ""}, // a trade needs no id
		{`{"s":"BTC","t":1,"p":"2","q":"3","side":"buy","act":"Trade"}`, trade, "", ""},
		// Cancels: price, qty and side are neither required nor read.
		{`{"s":"BTC","t":1,"i":7,"act":"cancel"}`, cancel, "", ""},
		{`{"s":"BTC","t":1,"i":"7","act":"CANCEL"}`, cancel, "", ""},
		{`{"s":"BTC","t":1,"i":7,"act":"Break"}`, cancel, "", ""},
		{`{"s":"BTC","t":1,"i":7,"act":"bUsT"}`, cancel, "", ""},
		{`{"s":"BTC","t":1,"i":7,"act":"c\u0061ncel"}`, cancel, "", ""},
		{`{"s":"BTC","t":1,"p":"0","q":"x","i":7,"side":"?","act":"cancel"}`, cancel, "", ""},
		// Corrections: checked as trades.
		{`{"s":"BTC","t":1,"p":"2","q":"3","i":7,"side":"sell","act":"correct"}`, correct, "", ""},
		{`{"s":"BTC","t":1,"p":"2","q":"3","i":7,"side":"sell","act":"CORRECTION"}`, correct, "", ""},
		// Anything else: invalid_action, naming the accepted values.
		{`{"s":"BTC","t":1,"p":"2","q":"3","i":7,"side":"buy","act":"cancelled"}`, trade, ReasonInvalidAction, `"cancelled" must be ` + ActionValues},
		{`{"s":"BTC","t":1,"p":"2","q":"3","i":7,"side":"buy","act":" cancel"}`, trade, ReasonInvalidAction, `"act" = " cancel" must be`},
		{`{"s":"BTC","t":1,"p":"2","q":"3","i":7,"side":"buy","act":""}`, trade, ReasonInvalidAction, `"act" = "" must be`},
		{`{"s":"BTC","t":1,"p":"2","q":"3","i":7,"side":"buy","act":1}`, trade, ReasonInvalidAction, `"act" = "1" must be`},
		{`{"s":"BTC","t":1,"p":"2","q":"3","i":7,"side":"buy","act":true}`, trade, ReasonInvalidAction, `"act" = "true" must be`},
		{`{"s":"BTC","t":1,"p":"2","q":"3","i":7,"side":"buy","act":{"x":"cancel"}}`, trade, ReasonInvalidAction, `"cancel", "break" or "bust"`},
		{`{"s":"BTC","t":1,"i":7,"act":"C"}`, trade, ReasonInvalidAction, `"correct" or "correction"`},
		// A cancel or correction needs its trade's id.
		{`{"s":"BTC","t":1,"act":"cancel"}`, cancel, ReasonMissingField, `field "i" is missing: a cancel names the trade`},
		{`{"s":"BTC","t":1,"i":"","act":"bust"}`, cancel, ReasonMissingField, `field "i" is missing: a cancel`},
		{`{"s":"BTC","t":1,"i":null,"act":"cancel"}`, cancel, ReasonMissingField, `field "i" is missing`},
		{`{"s":"BTC","t":1,"p":"2","q":"3","side":"buy","act":"correct"}`, correct, ReasonMissingField, `field "i" is missing: a correction`},
		// A cancel still needs its key and event time; a correction a price,
		// a qty and a side, valid.
		{`{"s":"BTC","i":7,"act":"cancel"}`, cancel, ReasonMissingField, `field "t" is missing`},
		{`{"s":"BTC","t":"yesterday","i":7,"act":"cancel"}`, cancel, ReasonInvalidTS, `field "t"`},
		{`{"t":1,"i":7,"act":"cancel"}`, cancel, ReasonMissingField, `field "s" is missing`},
		{`{"s":"BTC","t":1,"q":"3","i":7,"side":"buy","act":"correct"}`, correct, ReasonMissingField, `field "p" is missing`},
		{`{"s":"BTC","t":1,"p":"2","i":7,"side":"buy","act":"correct"}`, correct, ReasonMissingField, `field "q" is missing`},
		{`{"s":"BTC","t":1,"p":"2","q":"3","i":7,"act":"correct"}`, correct, ReasonMissingField, `field "side" is missing`},
		{`{"s":"BTC","t":1,"p":"-2","q":"3","i":7,"side":"buy","act":"correct"}`, correct, ReasonInvalidPrice, `must be positive`},
		{`{"s":"BTC","t":1,"p":"2","q":"0","i":7,"side":"buy","act":"correct"}`, correct, ReasonInvalidQty, `must be positive`},
	} {
		fresh := newActionTestDecoder(t, fields)
		for _, d := range []*Decoder{fresh, seen} {
			var tr candle.Trade
			tr.Action = candle.Action(9) // Decode must set it
			rej, ok := d.Decode([]byte(tc.in), &tr)
			switch {
			case tc.reason == "" && !ok:
				t.Fatalf("%s: rejected %s: %s", tc.in, rej.Reason, rej.Detail)
			case tc.reason != "" && ok:
				t.Fatalf("%s: accepted as %+v, want %s", tc.in, tr, tc.reason)
			case tc.reason != "" && (rej.Reason != tc.reason || !strings.Contains(rej.Detail, tc.detail) || rej.Key != keyOf(tc.in)):
				t.Fatalf("%s: rejected %s key=%q %q, want %s key=%q containing %q", tc.in, rej.Reason, rej.Key, rej.Detail, tc.reason, keyOf(tc.in), tc.detail)
			case !ok:
				continue
			case tr.Action != tc.action:
				t.Fatalf("%s: action %d, want %d", tc.in, tr.Action, tc.action)
			case tr.Action == cancel && (tr.ID != "7" || tr.TS != 1 || tr.Price.Sign() != 0 || tr.Qty.Sign() != 0 || tr.Side != candle.SideNone):
				t.Fatalf("%s: cancel %+v, want id 7 at ts 1 with no price, qty or side", tc.in, tr)
			case tr.Action != cancel && (tr.Price.String() != "2" || tr.Qty.String() != "3" || tr.Side == candle.SideNone):
				t.Fatalf("%s: %+v, want price 2, qty 3 and a side", tc.in, tr)
			}
		}
	}
}

// newActionTestDecoder builds a decoder for fields, primed with a cancel
// and a correction so that its shape cache holds a layout of each.
func newActionTestDecoder(t *testing.T, fields Fields) *Decoder {
	t.Helper()
	d, err := NewDecoder(DecoderConfig{Fields: fields})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range []string{`{"s":"ETH","t":5,"i":9,"act":"cancel"}`, `{"s":"ETH","t":5,"p":"1","q":"1","i":9,"side":"buy","act":"correct"}`} {
		var tr candle.Trade
		if rej, ok := d.Decode([]byte(rec), &tr); !ok {
			t.Fatalf("%s: %s %s", rec, rej.Reason, rej.Detail)
		}
	}
	return d
}

// keyOf is the key a rejection of in names ("" when in has none).
func keyOf(in string) string {
	var m struct{ S string }
	_ = json.Unmarshal([]byte(in), &m)
	return m.S
}

// A decoder with an action field and no id field refuses to build: its
// cancels could not name their trades.
func TestDecoderActionNeedsID(t *testing.T) {
	if _, err := NewDecoder(DecoderConfig{Fields: Fields{Key: "s", Time: "t", Price: "p", Action: "act"}}); err == nil {
		t.Fatal("NewDecoder accepted fields.action without fields.id")
	}
	for _, f := range []Fields{{Key: "s", Time: "t", Price: "p", ID: "i"}, {Key: "s", Time: "t", Price: "p", ID: "i", Action: "act"}} {
		d, err := NewDecoder(DecoderConfig{Fields: f})
		if err != nil || d.HasAction() != (f.Action != "") {
			t.Fatalf("%+v: HasAction %v, %v", f, d != nil && d.HasAction(), err)
		}
	}
}

// Decoding stays allocation-free with an action field mapped: for records
// without it (the fast path of a feed whose trades carry none), and for
// trades, cancels and corrections that carry it.
func TestDecodeActionAllocs(t *testing.T) {
	d := actionBenchDecoder(t)
	for _, extra := range []string{"", `,"X":"trade"`, `,"X":"CANCEL"`, `,"X":"correct"`} {
		in := withMember(benchTrades(64), extra)
		var tr candle.Trade
		i := 0
		allocs := testing.AllocsPerRun(1000, func() {
			if rej, ok := d.Decode(in[i%len(in)], &tr); !ok {
				t.Fatalf("%s: %s %s", in[i%len(in)], rej.Reason, rej.Detail)
			}
			i++
		})
		if allocs != 0 {
			t.Errorf("records ending %q: %v allocations per decode, want 0", extra, allocs)
		}
	}
}

// BenchmarkDecodeAction is BenchmarkDecode with an action field mapped:
// "absent" decodes the same records (no action field: the fast path a
// trade-only feed keeps), "cancels" the same records each carrying
// "X":"cancel".
func BenchmarkDecodeAction(b *testing.B) {
	for _, bc := range []struct{ name, extra string }{{"absent", ""}, {"cancels", `,"X":"cancel"`}} {
		b.Run(bc.name, func(b *testing.B) {
			benchDecode(b, actionBenchDecoder(b), withMember(benchTrades(1<<14), bc.extra))
		})
	}
}

// actionBenchDecoder is benchDecoder with an action field, "X".
func actionBenchDecoder(tb testing.TB) *Decoder {
	d, err := NewDecoder(DecoderConfig{Fields: Fields{Key: "s", Time: "T", Price: "p", Qty: "q", ID: "t", Action: "X"}, KeyCheck: true})
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// withMember returns recs (JSON objects) each with member (`,"name":value`)
// added at its end; recs themselves are not changed.
func withMember(recs [][]byte, member string) [][]byte {
	out := make([][]byte, len(recs))
	for i, r := range recs {
		out[i] = append(append(slices.Clone(r[:len(r)-1]), member...), '}')
	}
	return out
}
