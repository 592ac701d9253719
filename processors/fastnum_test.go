package processors

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// TestFixedAgreesWithDecimal: whatever the fast paths accept, decimal.Parse
// and Decimal.Mul accept too and give the same value.
func TestFixedAgreesWithDecimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const alphabet = "0123456789.-+e"
	gen := func() string {
		switch rng.IntN(3) {
		case 0: // digits.digits of any length, near the 19-digit and 18-place limits
			ip, fp := rng.IntN(21), rng.IntN(21)
			b := make([]byte, 0, ip+fp+1)
			for range ip {
				b = append(b, byte('0'+rng.IntN(10)))
			}
			if fp > 0 || rng.IntN(4) == 0 {
				b = append(b, '.')
			}
			for range fp {
				b = append(b, byte('0'+rng.IntN(10)))
			}
			return string(b)
		case 1:
			b := make([]byte, 1+rng.IntN(8))
			for i := range b {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			}
			return string(b)
		}
		return fmt.Sprintf("%d.%0*d", rng.Uint64N(1e6), rng.IntN(9), rng.Uint64N(1e8))
	}
	fast := 0
	for range 300000 {
		a, b := gen(), gen()
		fa, okA := parseFixed([]byte(a))
		da, err := decimal.Parse([]byte(a))
		if okA {
			fast++
			if err != nil || fa.decimal() != da {
				t.Fatalf("%q: fast %v, decimal.Parse %v (%v)", a, fa.decimal(), da, err)
			}
		}
		fb, okB := parseFixed([]byte(b))
		db, _ := decimal.Parse([]byte(b))
		if okA && okB {
			if q, ok := fa.mul(fb); ok {
				want, err := da.Mul(db)
				if err != nil || q != want {
					t.Fatalf("%q × %q: fast %v, Mul %v (%v)", a, b, q, want, err)
				}
			}
		}
	}
	if fast < 50000 {
		t.Fatalf("only %d inputs took the fast path", fast)
	}
}

// TestParseEpochMillisAgreesWithBytewise checks candle.ParseEpochMillis's
// eight-digit step (the decoder's event-time fast path) against a
// byte-by-byte parse on random digit strings with stray bytes.
func TestParseEpochMillisAgreesWithBytewise(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300000 {
		b := randomDigits(rng, 18, 12)
		var want int64
		wantOK := len(b) > 0 && len(b) <= 16
		for _, c := range b {
			if c < '0' || c > '9' {
				wantOK = false
			}
			want = want*10 + int64(c-'0')
		}
		got, ok := candle.ParseEpochMillis(b)
		if ok != wantOK || (ok && got != want) {
			t.Fatalf("ParseEpochMillis(%q) = %d, %v; want %d, %v", b, got, ok, want, wantOK)
		}
	}
}

// TestFixedWordAgreesWithFixed: parseFixedWord decides the numbers of up
// to 8 bytes exactly as parseFixed does, on digit strings with dots and
// stray bytes at every offset of a buffer.
func TestFixedWordAgreesWithFixed(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const alphabet = "012345678901234567890123456789.-+eE\x00\x7f\x80\xff/:"
	decided := 0
	for range 500000 {
		buf := make([]byte, rng.IntN(20))
		for i := range buf {
			buf[i] = alphabet[rng.IntN(len(alphabet))]
			if rng.IntN(16) == 0 {
				buf[i] = byte(rng.IntN(256))
			}
		}
		start := rng.IntN(len(buf) + 1)
		end := start + rng.IntN(len(buf)-start+1)
		got, ok := parseFixedWord(buf, start, end)
		want, wantOK := parseFixed(buf[start:end])
		if !ok {
			if wantOK && end-start <= 8 && start+8 <= len(buf) {
				t.Fatalf("parseFixedWord(%q) declined a number parseFixed reads", buf[start:end])
			}
			continue
		}
		decided++
		if !wantOK || got != want {
			t.Fatalf("parseFixedWord(%q) = %+v; parseFixed says %+v, %v", buf[start:end], got, want, wantOK)
		}
	}
	if decided < 20000 {
		t.Fatalf("only %d inputs decided by parseFixedWord", decided)
	}
}

// TestNumericIDAgreesWithParseUint: numericID accepts exactly the
// canonical decimal spellings (no sign, no leading zero, fits uint64 in at
// most 19 digits) and reads them as strconv does, on digit strings of every
// length with stray bytes and leading zeros.
func TestNumericIDAgreesWithParseUint(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for range 300000 {
		id := string(randomDigits(rng, 22, 15))
		want, err := strconv.ParseUint(id, 10, 64)
		wantOK := err == nil && len(id) <= 19 && (len(id) == 1 || id[0] != '0') && strconv.FormatUint(want, 10) == id
		got, ok := numericID(id)
		if ok != wantOK || (ok && got != want) {
			t.Fatalf("numericID(%q) = %d, %v; want %d, %v", id, got, ok, want, wantOK)
		}
	}
}

// randomDigits returns up to maxLen-1 random digits, about one byte in
// strayOneIn of them replaced by any byte.
func randomDigits(rng *rand.Rand, maxLen, strayOneIn int) []byte {
	b := make([]byte, rng.IntN(maxLen))
	for i := range b {
		b[i] = byte('0' + rng.IntN(10))
		if rng.IntN(strayOneIn) == 0 {
			b[i] = byte(rng.IntN(256))
		}
	}
	return b
}
