package processors

import (
	"math/bits"

	"github.com/kandle/kandle/decimal"
)

// Fast paths for the numbers of a typical trade ("65000.10", "0.00123"):
// at most 19 digits with an optional fraction, no sign, no exponent. Such a
// number is a 64-bit mantissa and a count of decimal places, so it becomes
// a Decimal with one multiplication and price × qty needs no division.
// Anything else goes through decimal.Parse and Decimal.Mul, which give the
// same results for the inputs the fast paths accept.

// fixed is mant / 10^dp.
type fixed struct {
	mant uint64
	dp   int
}

var pow10 = [19]uint64{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12,
	1e13, 1e14, 1e15, 1e16, 1e17, 1e18}

// parseFixed reads digits+ ('.' digits+)? of at most 19 digits and at most
// decimal.Scale places; ok is false for anything else.
func parseFixed(b []byte) (f fixed, ok bool) {
	if len(b) == 0 || len(b) > 20 {
		return f, false
	}
	var m uint64
	dot := -1
	for i, c := range b {
		if d := c - '0'; d < 10 {
			m = m*10 + uint64(d)
			continue
		}
		if c != '.' || dot >= 0 || i == 0 || i == len(b)-1 {
			return f, false
		}
		dot = i
	}
	switch {
	case dot < 0:
		if len(b) > 19 {
			return f, false
		}
		return fixed{m, 0}, true
	case len(b) > 20:
		return f, false
	}
	return fixed{m, len(b) - dot - 1}, true
}

// decimal returns f as a Decimal (any 64-bit mant with dp ≤ 18 fits).
func (f fixed) decimal() decimal.Decimal {
	hi, lo := bits.Mul64(f.mant, pow10[decimal.Scale-f.dp])
	return decimal.FromRaw(hi, lo)
}

// mul returns f × g exactly when the mantissa product fits 64 bits and has
// at most decimal.Scale places; ok is false otherwise (use Decimal.Mul).
func (f fixed) mul(g fixed) (decimal.Decimal, bool) {
	hi, lo := bits.Mul64(f.mant, g.mant)
	dp := f.dp + g.dp
	if hi != 0 || dp > decimal.Scale {
		return decimal.Zero, false
	}
	return fixed{lo, dp}.decimal(), true
}
