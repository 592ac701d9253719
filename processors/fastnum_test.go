package processors

import (
	"fmt"
	"math/rand/v2"
	"testing"

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
