package processors

import (
	"math/rand/v2"
	"testing"

	"github.com/kandle/kandle/candle"
)

// TestSWARAgreesWithBytewise checks skipDigits and scanStr's eight-byte
// steps against byte-by-byte loops on random bytes.
func TestSWARAgreesWithBytewise(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const alphabet = "0123456789/:\"\\\x00\x1f\x20\x7f\x80\xff.-eaZ"
	for range 200000 {
		b := make([]byte, rng.IntN(24))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
			if rng.IntN(2) == 0 {
				b[i] = byte(rng.IntN(256))
			}
		}
		i := 0
		if len(b) > 0 {
			i = rng.IntN(len(b) + 1)
		}
		want := i
		for want < len(b) && b[want] >= '0' && b[want] <= '9' {
			want++
		}
		if got := skipDigits(b, i); got != want {
			t.Fatalf("skipDigits(%q, %d) = %d, want %d", b, i, got, want)
		}
		if i < len(b) {
			b[i] = '"'
			end, esc, ok := scanStr(b, i)
			wEnd, wEsc, wOK := refStr(b, i)
			if end != wEnd || esc != wEsc || ok != wOK {
				t.Fatalf("scanStr(%q, %d) = %d %v %v, byte by byte %d %v %v", b, i, end, esc, ok, wEnd, wEsc, wOK)
			}
		}
	}
}

// refStr is scanStr one byte at a time (the scanner before the SWAR steps).
func refStr(b []byte, q int) (end int, esc, ok bool) {
	i := q + 1
	for {
		for i < len(b) && plain[b[i]] {
			i++
		}
		if i >= len(b) {
			return i, false, false
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, esc, true
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				return q, false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return q, false, false
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return q, false, false
					}
				}
				i += 6
			default:
				return i, false, false
			}
		default:
			return i, false, false
		}
	}
}

// TestMemberNamesOfEveryLength: field names from 1 to 12 bytes are found
// wherever they sit in the record (the short-name word compare needs 8
// readable bytes, so names near the end take the slow path).
func TestMemberNamesOfEveryLength(t *testing.T) {
	names := []string{"k", "ts", "prc", "qqqq", "idabc", "sym123", "keyname", "keyname8", "keyname9x", "keyname10xy", "a.keyname11xy"}
	for i := 0; i+2 < len(names); i++ {
		f := Fields{Key: names[i], Time: names[i+1], Price: names[i+2]}
		d, err := NewDecoder(DecoderConfig{Fields: f})
		if err != nil {
			t.Fatal(err)
		}
		k, ts, p := names[i], names[i+1], names[i+2]
		pv := `"2"`
		if pp, leaf, ok := cut(p); ok {
			p, pv = pp, `{"`+leaf+`":"2"}`
		}
		for _, rec := range []string{
			`{"` + k + `":"A","` + ts + `":5,"` + p + `":` + pv + `}`,
			`{"` + p + `":` + pv + `,"x` + k + `":"B","` + ts + `":5,"` + k + `":"A"}`,
			`{"` + ts + `":5,"` + p + `":` + pv + `,"` + k + `":"A"}`,
		} {
			var tr candle.Trade
			if rej, ok := d.Decode([]byte(rec), &tr); !ok || tr.Key != "A" || tr.TS != 5 || tr.Price.String() != "2" {
				t.Fatalf("%s: ok=%v %s, trade %+v", rec, ok, rej.Detail, tr)
			}
		}
	}
}

func cut(path string) (head, leaf string, ok bool) {
	for i := range path {
		if path[i] == '.' {
			return path[:i], path[i+1:], true
		}
	}
	return path, "", false
}

// TestSpecialSharesHighBits: special's one &^x equals three separate
// zero-byte tests (the formula before it was folded).
func TestSpecialSharesHighBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for range 1000000 {
		x := rng.Uint64()
		if rng.IntN(2) == 0 { // plant some '"', '\\' and control bytes
			x = x&^(0xff<<(8*rng.IntN(8))) | uint64("\"\\\x00\x1f\x20\x7f\x80\xa2"[rng.IntN(8)])<<(8*rng.IntN(8))
		}
		q, bs := x^(ones*'"'), x^(ones*'\\')
		want := ((q-ones)&^q | (bs-ones)&^bs | (x-ones*0x20)&^x) & highs
		if got := special(x); got != want {
			t.Fatalf("special(%#x) = %#x, want %#x", x, got, want)
		}
	}
}
