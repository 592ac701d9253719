package processors

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kandle/kandle/candle"
)

// shapeBases are flat records the shape cache learns, with the value kinds
// and spacings it holds (escapes, null, booleans, signed and exponent
// numbers, white space around everything).
var shapeBases = []string{
	`{"e":"trade","E":1704103200003,"s":"SYM0042USDT","t":100000007,"p":"123.45","q":"0.01234","T":1704103200001,"m":true,"M":true}`,
	`{"s":"BTC","t":1704103200000,"p":"1.5","q":"2","i":7}`,
	`{"s":"B\u0054C","t":"2024-01-01T10:00:00Z","p":1.5,"q":2e-3,"i":"x\"y","n":null,"f":false}`,
	` { "s" : "BTC" , "t" : 1 , "p" : "1" , "q" : -0.5E+3 , "i" : "longer than eight bytes" } `,
	"{\"s\":\"ETH\",\n\t\"t\":1704103200000,\r\n\"p\":\"0.000000012345678901\",\"q\":\"12345.123456789012345678\",\"i\":0}",
	`{"averyveryverylongmembername":"x","s":"A","t":5,"p":"2","q":"3"}`,
}

// decodeResult is everything Decode reports, for comparing two decoders.
func decodeResult(d *Decoder, in []byte) string {
	var tr candle.Trade
	rej, ok := d.Decode(in, &tr)
	if !ok {
		return fmt.Sprintf("rejected %s key=%q: %s", rej.Reason, rej.Key, rej.Detail)
	}
	return fmt.Sprintf("ok key=%q ts=%d p=%s q=%s id=%q action=%d", tr.Key, tr.TS, tr.Price, tr.Qty, tr.ID, tr.Action)
}

// TestShapeCacheAgreesWithGeneral: a decoder whose shape cache has learned
// a record decodes random variants of it (values changed, bytes flipped,
// cut or inserted anywhere) exactly as the general scanner alone does —
// same verdict, reason, "near byte N" detail and trade — and agrees with
// encoding/json on validity. It also checks that most variants that keep
// the layout do take the cached path, so the comparison is not vacuous.
func TestShapeCacheAgreesWithGeneral(t *testing.T) {
	cached, general := testDecoder(t), testDecoder(t)
	general.noShape = true
	rng := rand.New(rand.NewPCG(11, 12))
	const alphabet = "{}[]\":,.-+eE0123456789 \\/ubfnrtTx\x00\x1f\x7f\xff"
	hits, valid := 0, 0
	for i := range 100000 {
		base := shapeBases[i%len(shapeBases)]
		if got := decodeResult(cached, []byte(base)); got != decodeResult(general, []byte(base)) {
			t.Fatalf("%s: cached %s", base, got)
		}
		if cached.shape.n == 0 {
			t.Fatalf("%s: no shape learned", base)
		}
		in := []byte(base)
		for range 1 + rng.IntN(2) {
			if len(in) == 0 {
				break
			}
			p := rng.IntN(len(in))
			if rng.IntN(2) == 0 && len(in) == len(base) {
				// Inside a value (as the scanner recorded base's members):
				// most of these keep the layout and take the cached path.
				m := general.rec.m[rng.IntN(general.rec.n)]
				p = m.start + rng.IntN(m.end-m.start)
			}
			switch rng.IntN(4) {
			case 0, 1:
				in[p] = alphabet[rng.IntN(len(alphabet))]
			case 2:
				in = in[:p]
			case 3:
				in = append(in[:p], append([]byte{alphabet[rng.IntN(len(alphabet))]}, in[p:]...)...)
			}
		}
		var caps [numFields]span
		if cached.shape.match(in, &caps) {
			hits++
		}
		if json.Valid(in) {
			valid++
		}
		checkDecode(t, cached, in)
		// checkDecode may have learned in's shape: learn base's again.
		decodeResult(cached, []byte(base))
		if got, want := decodeResult(cached, in), decodeResult(general, in); got != want {
			t.Fatalf("%q:\ncached  %s\ngeneral %s", in, got, want)
		}
	}
	if hits < 10000 || valid < 10000 || hits > 95000 {
		t.Fatalf("%d variants matched the cached shape, %d were valid JSON: the mutation does not exercise both paths", hits, valid)
	}
}

// TestShapeCacheFollowsTheStream: a record of another layout is scanned in
// full and its shape replaces the cached one; an object the cache cannot
// hold (a nested value) clears it; a record that is not an object, or not
// valid, leaves it as it was.
func TestShapeCacheFollowsTheStream(t *testing.T) {
	d := testDecoder(t)
	const (
		learns = iota
		clears
		keeps
	)
	for _, c := range []struct {
		in   string
		want int
	}{
		{`{"s":"A","t":5,"p":"2"}`, learns},
		{`{"t":5,"s":"A","p":"2"}`, learns},
		{`[{"t":5,"s":"A","p":"2"}]`, keeps},
		{`{"t":5,"s":"A","p":"2"} x`, keeps},
		{`{"t":5,"s":"A","p":"2","x":{"a":1}}`, clears},
		{`{"s":"A","t":5,"p":"2"}`, learns},
		{`{"s":"A","t":5,"p":"2","x":[]}`, clears},
	} {
		before := d.shape
		decodeResult(d, []byte(c.in))
		switch c.want {
		case learns:
			var caps [numFields]span
			if d.shape.n == 0 || !d.shape.match([]byte(c.in), &caps) || caps != d.caps {
				t.Errorf("%s: not learned, or its shape does not read it as the scanner did", c.in)
			}
		case clears:
			if d.shape.n != 0 {
				t.Errorf("%s: a shape of %d members is cached", c.in, d.shape.n)
			}
		case keeps:
			if d.shape.n != before.n || string(d.shape.buf) != string(before.buf) {
				t.Errorf("%s: the cached shape changed", c.in)
			}
		}
	}
}
