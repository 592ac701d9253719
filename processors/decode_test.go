package processors

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/kandle/kandle/candle"
)

var decodeSeeds = []string{
	`{"s":"BTC","t":1704103200000,"p":"1.5","q":"2","i":7}`,
	`{"s":"B\u0054C","t":"2024-01-01T10:00:00Z","p":1.5,"q":2e-3,"i":"x\"y"}`,
	`{"data":{"s":"BTC","T":1,"p":"1"},"x":[1,2,{"a":null}],"y":true,"z":-0.5e+3}`,
	` {"s" : "BTC" , "t" : 1 , "p" : "1" , "q" : "1" } `,
	`[1,2,3]`, `"str"`, `12`, `null`, `{}`, `{"a":[]}`, `{"a":{}}`, `{"s":"\ud83d\ude00"}`,
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
	if ok && (tr.Key == "" || tr.Price.Sign() <= 0 || tr.Qty.Sign() <= 0) {
		t.Fatalf("%q accepted with an invalid trade %+v", in, tr)
	}
}

func testDecoder(t testing.TB) *Decoder {
	d, err := NewDecoder(DecoderConfig{Fields: Fields{Key: "s", Time: "t", Price: "p", Qty: "q", ID: "i"}})
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
