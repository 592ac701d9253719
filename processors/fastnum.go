package processors

import (
	"encoding/binary"
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

// parseFixedWord is parseFixed for a number of at most 8 bytes,
// value[start:end], when value holds 8 bytes from start: the bytes are
// checked and converted in a few word operations instead of a branch and a
// multiply per byte. ok false means "not decided here": call parseFixed.
func parseFixedWord(value []byte, start, end int) (f fixed, ok bool) {
	n := end - start
	if n < 1 || n > 8 || start+8 > len(value) {
		return f, false
	}
	// (Shift counts are masked with &63 so that each compiles to one shift.)
	low := ^uint64(0) >> ((64 - 8*uint(n)) & 63)                      // the number's bytes
	d := (binary.LittleEndian.Uint64(value[start:]) ^ ones*'0') & low // digits become 0..9
	// Exact per-byte tests (no carry or borrow crosses a byte): bytes ≥ 10
	// (non-digits), and bytes equal to '.'^'0'.
	nonDigit := (((d | highs) - ones*10) | d) & highs & low
	e := d ^ ones*('.'^'0')
	dot := ^(((e &^ highs) + ones*0x7f) | e) & highs & low
	if nonDigit != dot {
		return f, false // a byte that is neither a digit nor a '.'
	}
	var dp int
	if dot != 0 {
		k := bits.TrailingZeros64(dot) >> 3 // the dot's index
		if dot&(dot-1) != 0 || k == 0 || k == n-1 {
			return f, false
		}
		// Drop the dot: the bytes after it move down one place.
		below := uint64(1)<<((8*uint(k))&63) - 1
		d = d&below | (d>>8)&^below
		n--
		dp = n - k
	}
	// Leading zeros pad the n digits to eight; then three SWAR steps add up
	// pairs of digits, pairs of pairs and the two halves.
	d <<= (8 * uint(8-n)) & 63
	d = (d*10 + d>>8) & 0x00ff00ff00ff00ff
	d = (d*100 + d>>16) & 0x0000ffff0000ffff
	d = d*10000 + d>>32
	return fixed{d & 0xffffffff, dp}, true
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
