// Package decimal is kandle's exact number type for prices and volumes.
//
// A Decimal is a signed fixed-point number with 18 decimal places held in a
// 128-bit two's complement integer, so sums never round: ten quantities of
// 0.1 add up to exactly 1. Values up to ±1.7e20 are representable. Parsing
// rejects inputs with more than 18 significant decimal places, and Mul fails
// instead of rounding when an exact product needs more than 18 places, so an
// inexact number can never enter a candle.
//
// # Accepted inputs
//
// Parse reads an optional sign, digits with an optional point and fraction
// (".5" and "5." are allowed), and an optional exponent ("1e-7", "1.5E+3").
// The value must have at most 18 significant decimal places (trailing zeros
// do not count) and fit the 128-bit range. kandle accepts a price or
// quantity when, in addition, it is positive and below 10^20 (InInputRange,
// MaxIntDigits): at most 20 digits before the point and 18 after, 38
// significant digits in all, which every sink stores exactly.
//
// # Exact sums
//
// Volumes and quote volumes are Sums: Product(price, qty) is exact whatever
// the inputs (up to 36 decimal places), and adding Sums never rounds and
// never overflows. A Sum is a Decimal in the common case and widens to an
// arbitrary-precision integer scaled by 10^36 only when a value needs it.
// ParseSum reads the same syntax with up to 36 places and MaxSumDigits
// digits; AppendBinary/ReadBinary are its compact binary form (state).
//
// Decimal is a plain value (two machine words): it is compared with Cmp,
// copied freely and never allocates on the arithmetic path. A narrow Sum
// does not allocate either.
package decimal

import (
	"errors"
	"math/bits"
	"strconv"
)

// Scale is the number of decimal places every Decimal carries.
const Scale = 18

const unit = 1_000_000_000_000_000_000 // 10^Scale

// Errors returned by Parse and the arithmetic.
var (
	ErrSyntax    = errors.New("decimal: not a number")
	ErrPrecision = errors.New("decimal: more than 18 decimal places")
	ErrRange     = errors.New("decimal: out of range")
)

// Decimal is raw/10^18 where raw is the 128-bit two's complement integer hi:lo.
// The zero value is 0.
type Decimal struct {
	hi, lo uint64
}

// Zero is the number 0.
var Zero Decimal

// FromInt returns n as a Decimal.
func FromInt(n int64) Decimal {
	neg := n < 0
	m := uint64(n)
	if neg {
		m = uint64(-n)
	}
	hi, lo := bits.Mul64(m, unit)
	d := Decimal{hi, lo}
	if neg {
		d = d.Neg()
	}
	return d
}

// Sign returns -1, 0 or +1.
func (d Decimal) Sign() int {
	switch {
	case int64(d.hi) < 0:
		return -1
	case d.hi == 0 && d.lo == 0:
		return 0
	default:
		return 1
	}
}

// IsZero reports whether d == 0.
func (d Decimal) IsZero() bool { return d.hi == 0 && d.lo == 0 }

// Neg returns -d.
func (d Decimal) Neg() Decimal {
	lo, borrow := bits.Sub64(0, d.lo, 0)
	hi, _ := bits.Sub64(0, d.hi, borrow)
	return Decimal{hi, lo}
}

// Cmp returns -1, 0 or +1 as a is less than, equal to or greater than b.
func (a Decimal) Cmp(b Decimal) int {
	if a.hi != b.hi {
		if int64(a.hi) < int64(b.hi) {
			return -1
		}
		return 1
	}
	switch {
	case a.lo < b.lo:
		return -1
	case a.lo > b.lo:
		return 1
	}
	return 0
}

// Equal reports whether a == b.
func (a Decimal) Equal(b Decimal) bool { return a == b }

// Add returns a+b, or ErrRange on overflow.
func (a Decimal) Add(b Decimal) (Decimal, error) {
	lo, carry := bits.Add64(a.lo, b.lo, 0)
	hi, _ := bits.Add64(a.hi, b.hi, carry)
	// Signed overflow: operands share a sign that the result does not.
	if (a.hi^hi)&(b.hi^hi)>>63 != 0 {
		return Decimal{}, ErrRange
	}
	return Decimal{hi, lo}, nil
}

// Sub returns a-b, or ErrRange on overflow.
func (a Decimal) Sub(b Decimal) (Decimal, error) { return a.Add(b.Neg()) }

// Mul returns the exact product a×b. It fails with ErrPrecision when the
// product needs more than 18 decimal places and ErrRange when it is too large.
func (a Decimal) Mul(b Decimal) (Decimal, error) {
	neg := (a.Sign() < 0) != (b.Sign() < 0)
	ua, ub := a.abs(), b.abs()
	var q1, q0, r uint64
	if ua.hi == 0 && ub.hi == 0 {
		h, l := bits.Mul64(ua.lo, ub.lo)
		q1, r = bits.Div64(0, h, unit)
		q0, r = bits.Div64(r, l, unit)
	} else {
		// 256-bit product in limbs p3:p2:p1:p0, then divide by 10^18.
		h00, l00 := bits.Mul64(ua.lo, ub.lo)
		h01, l01 := bits.Mul64(ua.lo, ub.hi)
		h10, l10 := bits.Mul64(ua.hi, ub.lo)
		h11, l11 := bits.Mul64(ua.hi, ub.hi)
		p0 := l00
		p1, c1 := bits.Add64(h00, l01, 0)
		p2, c2 := bits.Add64(h01, l11, c1)
		p3, _ := bits.Add64(h11, 0, c2)
		p1, c1 = bits.Add64(p1, l10, 0)
		p2, c2 = bits.Add64(p2, h10, c1)
		p3, _ = bits.Add64(p3, 0, c2)
		var q3, q2 uint64
		q3, r = bits.Div64(0, p3, unit)
		q2, r = bits.Div64(r, p2, unit)
		q1, r = bits.Div64(r, p1, unit)
		q0, r = bits.Div64(r, p0, unit)
		if q3 != 0 || q2 != 0 {
			return Decimal{}, ErrRange
		}
	}
	if r != 0 {
		return Decimal{}, ErrPrecision
	}
	if q1>>63 != 0 {
		return Decimal{}, ErrRange
	}
	d := Decimal{q1, q0}
	if neg {
		d = d.Neg()
	}
	return d, nil
}

func (d Decimal) abs() Decimal {
	if int64(d.hi) < 0 {
		return d.Neg()
	}
	return d
}

var pow10 = [20]uint64{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12,
	1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19}

// Parse reads a decimal number: an optional sign, digits with an optional
// fraction, and an optional exponent ("12", "-0.5", "1e-7", "65000.10").
func Parse(b []byte) (Decimal, error) {
	d, err := parse(b)
	if err == ErrRange {
		// The digits overflowed 128 bits, maybe only through trailing zeros
		// ("1.000…000" with 40 zeros): read them exactly, then narrow.
		s, werr := parseWide(b)
		if werr == ErrSumPrecision {
			return Decimal{}, ErrPrecision
		}
		if werr == nil {
			if n, ok := s.Decimal(); ok {
				return n, nil
			}
			if s.fitsRange() {
				return Decimal{}, ErrPrecision // in range, but more than 18 places
			}
		}
	}
	return d, err
}

func parse(b []byte) (Decimal, error) {
	i, n := 0, len(b)
	if n == 0 {
		return Decimal{}, ErrSyntax
	}
	neg := false
	if b[0] == '-' || b[0] == '+' {
		neg = b[0] == '-'
		i++
	}
	var hi, lo uint64 // magnitude accumulated as an integer
	digits, frac, sig := 0, 0, 0
	seenDot := false
	for ; i < n; i++ {
		c := b[i]
		if c == '.' {
			if seenDot {
				return Decimal{}, ErrSyntax
			}
			seenDot = true
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		digits++
		if seenDot {
			frac++
		}
		if hi == 0 && lo < 1e18 {
			lo = lo*10 + uint64(c-'0')
		} else {
			var ok bool
			if hi, lo, ok = mulAdd(hi, lo, 10, uint64(c-'0')); !ok {
				return Decimal{}, ErrRange
			}
		}
		if hi != 0 || lo != 0 {
			sig++
		}
	}
	if digits == 0 {
		return Decimal{}, ErrSyntax
	}
	exp, err := exponent(b[i:])
	if err != nil {
		return Decimal{}, err
	}
	dp := frac - exp // decimal places of hi:lo
	for dp > Scale {
		if hi == 0 && lo == 0 {
			dp = Scale
			break
		}
		q1, r := bits.Div64(0, hi, 10)
		q0, r := bits.Div64(r, lo, 10)
		if r != 0 {
			return Decimal{}, ErrPrecision
		}
		hi, lo = q1, q0
		dp--
	}
	for shift := Scale - dp; shift > 0; {
		k := min(shift, 19)
		var ok bool
		if hi, lo, ok = mulAdd(hi, lo, pow10[k], 0); !ok {
			return Decimal{}, ErrRange
		}
		shift -= k
	}
	if hi>>63 != 0 {
		return Decimal{}, ErrRange
	}
	d := Decimal{hi, lo}
	if neg {
		d = d.Neg()
	}
	return d, nil
}

// exponent reads what follows the digits of a number: nothing, or an
// exponent ("e-7", "E+3") of at most 1000 in magnitude.
func exponent(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if b[0] != 'e' && b[0] != 'E' {
		return 0, ErrSyntax
	}
	b = b[1:]
	neg := false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg = b[0] == '-'
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, ErrSyntax
	}
	exp := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, ErrSyntax
		}
		exp = exp*10 + int(c-'0')
		if exp > 1000 {
			return 0, ErrRange
		}
	}
	if neg {
		exp = -exp
	}
	return exp, nil
}

// MustParse is Parse for constants in tests and examples; it panics on error.
func MustParse(s string) Decimal {
	d, err := Parse([]byte(s))
	if err != nil {
		panic(err)
	}
	return d
}

// mulAdd returns hi:lo × m + a and whether it fits in 128 bits.
func mulAdd(hi, lo, m, a uint64) (uint64, uint64, bool) {
	h1, l1 := bits.Mul64(lo, m)
	h2, l2 := bits.Mul64(hi, m)
	if h2 != 0 {
		return 0, 0, false
	}
	nh, c := bits.Add64(h1, l2, 0)
	if c != 0 {
		return 0, 0, false
	}
	nl, c := bits.Add64(l1, a, 0)
	nh, c = bits.Add64(nh, 0, c)
	if c != 0 {
		return 0, 0, false
	}
	return nh, nl, true
}

// String formats d in plain notation without trailing zeros ("1", "0.1", "-2.25").
func (d Decimal) String() string { return string(d.Append(nil)) }

// Append appends the String form of d to dst.
func (d Decimal) Append(dst []byte) []byte {
	if d.Sign() < 0 {
		dst = append(dst, '-')
	}
	m := d.abs()
	// Integer part and fraction: m = ip×10^18 + frac, two 128/64 divisions.
	q1, r := bits.Div64(0, m.hi, unit)
	ip, frac := bits.Div64(r, m.lo, unit)
	if q1 != 0 {
		return m.appendSlow(dst)
	}
	dst = strconv.AppendUint(dst, ip, 10)
	if frac == 0 {
		return dst
	}
	// Drop the fraction's trailing zeros (at most 17) in five steps, then
	// write the rest, zero-padded to its width, two digits at a time:
	// candle prices have few places, so this is a few steps, not 18.
	width := Scale
	for _, z := range [...]struct {
		n int
		p uint64
	}{{16, 1e16}, {8, 1e8}, {4, 1e4}, {2, 1e2}, {1, 10}} {
		if frac%z.p == 0 {
			frac /= z.p
			width -= z.n
		}
	}
	var buf [Scale]byte
	i := width
	for ; i >= 2; i -= 2 {
		q := frac / 100
		r := (frac - q*100) * 2
		buf[i-2], buf[i-1] = digitPairs[r], digitPairs[r+1]
		frac = q
	}
	if i == 1 {
		buf[0] = byte('0' + frac)
	}
	dst = append(dst, '.')
	return append(dst, buf[:width]...)
}

// digitPairs holds "00" to "99": two digits per division by 100.
const digitPairs = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"

// appendSlow formats a magnitude whose integer part exceeds 64 bits.
func (m Decimal) appendSlow(dst []byte) []byte {
	var buf [40]byte
	pos := len(buf)
	hi, lo := m.hi, m.lo
	for hi != 0 || lo != 0 || pos > len(buf)-Scale-1 {
		var r uint64
		hi, r = bits.Div64(0, hi, 10)
		lo, r = bits.Div64(r, lo, 10)
		pos--
		buf[pos] = byte('0' + r)
	}
	digits := buf[pos:]
	intPart := digits[:len(digits)-Scale]
	fracPart := digits[len(digits)-Scale:]
	end := len(fracPart)
	for end > 0 && fracPart[end-1] == '0' {
		end--
	}
	dst = append(dst, intPart...)
	if end > 0 {
		dst = append(dst, '.')
		dst = append(dst, fracPart[:end]...)
	}
	return dst
}

// MarshalText implements encoding.TextMarshaler.
func (d Decimal) MarshalText() ([]byte, error) { return d.Append(nil), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Decimal) UnmarshalText(b []byte) error {
	v, err := Parse(b)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalJSON writes d as a JSON string, so no reader turns it into a float.
func (d Decimal) MarshalJSON() ([]byte, error) {
	b := append([]byte{'"'}, d.Append(nil)...)
	return append(b, '"'), nil
}

// UnmarshalJSON accepts a JSON string or number.
func (d *Decimal) UnmarshalJSON(b []byte) error {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		b = b[1 : len(b)-1]
	}
	return d.UnmarshalText(b)
}

// Raw returns the value ×10^18 as a 128-bit two's complement integer in two
// words: the unscaled form Parquet DECIMAL(38,18) and the state codecs store.
func (d Decimal) Raw() (hi, lo uint64) { return d.hi, d.lo }

// FromRaw is the inverse of Raw.
func FromRaw(hi, lo uint64) Decimal { return Decimal{hi, lo} }

// MaxIntDigits is how many digits before the point a price or quantity may
// have: kandle accepts values below 10^20, so every accepted value has at
// most 38 significant digits (20 + 18) and fits a DynamoDB number and a
// Parquet DECIMAL(38,18). Sums (Sum) are not limited.
const MaxIntDigits = 20

// 10^38, the raw form of 10^20.
const limitHi, limitLo = 0x4B3B4CA85A86C47A, 0x098A224000000000

// InInputRange reports whether |d| < 10^20 (see MaxIntDigits).
func (d Decimal) InInputRange() bool {
	m := d.abs()
	return m.hi < limitHi || (m.hi == limitHi && m.lo < limitLo)
}
