package processors

import (
	"math/rand/v2"
	"testing"
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
