package decimal

import (
	"encoding/binary"
	"errors"
	"math/big"
	"math/bits"
)

// SumScale is the number of decimal places a Sum keeps: every digit of a
// product of two Decimals (18 + 18).
const SumScale = 36

// MaxSumDigits bounds the digits ParseSum accepts (before and after the
// point together), so a hostile input cannot make kandle allocate or loop
// without limit. It is far beyond any real volume.
const MaxSumDigits = 120

// Sum is an exact sum of Decimals and of products of Decimals: the volume
// and quote volume of a candle. It never rounds and never overflows.
//
// In the common case a Sum is a Decimal (18 places, 128-bit) and adding two
// of them costs what adding two Decimals costs. When a product needs more
// than 18 places, or a sum leaves the 128-bit range, the Sum widens to an
// arbitrary-precision integer scaled by 10^36; results that fit the narrow
// form again are narrowed back, so equal values have equal representations
// and compare equal with ==, except wide values, which compare with Equal.
//
// A wide Sum's integer is never modified after it is built: Sums are values
// that may be copied and shared freely.
type Sum struct {
	d Decimal
	w *big.Int // non-nil: the value is w / 10^36 and d is zero
}

var (
	bigUnit    = new(big.Int).SetUint64(unit)                                          // 10^18
	bigSumUnit = new(big.Int).Mul(bigUnit, bigUnit)                                    // 10^36
	bigTen     = big.NewInt(10)                                                        //
	maxRaw     = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 127), big.NewInt(1)) // 2^127-1
	minRaw     = new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), 127))                // -2^127
)

// SumOf returns d as a Sum.
func SumOf(d Decimal) Sum { return Sum{d: d} }

// Product returns the exact product a×b as a Sum.
func Product(a, b Decimal) Sum {
	if p, err := a.Mul(b); err == nil {
		return Sum{d: p}
	}
	w := new(big.Int).Mul(a.bigRaw(), b.bigRaw()) // scale 18+18 = 36
	return narrow(w)
}

// IsWide reports whether s is held in the wide form (more than 18 places or
// outside the Decimal range).
func (s Sum) IsWide() bool { return s.w != nil }

// Decimal returns s as a Decimal; ok is false when s does not fit one.
func (s Sum) Decimal() (d Decimal, ok bool) { return s.d, s.w == nil }

// Add returns the exact sum s+t.
func (s Sum) Add(t Sum) Sum {
	if s.w == nil && t.w == nil {
		if r, ok := s.d.addOK(t.d); ok {
			return Sum{d: r}
		}
	}
	return narrow(new(big.Int).Add(s.wide(), t.wide()))
}

// AddDecimal returns the exact sum s+d.
func (s Sum) AddDecimal(d Decimal) Sum {
	if s.w == nil {
		if r, ok := s.d.addOK(d); ok {
			return Sum{d: r}
		}
	}
	return narrow(new(big.Int).Add(s.wide(), SumOf(d).wide()))
}

// Sign returns -1, 0 or +1.
func (s Sum) Sign() int {
	if s.w != nil {
		return s.w.Sign()
	}
	return s.d.Sign()
}

// IsZero reports whether s == 0.
func (s Sum) IsZero() bool { return s.w == nil && s.d.IsZero() }

// Cmp returns -1, 0 or +1 as s is less than, equal to or greater than t.
func (s Sum) Cmp(t Sum) int {
	if s.w == nil && t.w == nil {
		return s.d.Cmp(t.d)
	}
	return s.wide().Cmp(t.wide())
}

// Equal reports whether s == t as numbers.
func (s Sum) Equal(t Sum) bool { return s.Cmp(t) == 0 }

// Rat returns s as an exact rational (for tests and independent checks).
func (s Sum) Rat() *big.Rat { return new(big.Rat).SetFrac(s.wide(), bigSumUnit) }

// wide returns s ×10^36 as a new or shared (read-only) integer.
func (s Sum) wide() *big.Int {
	if s.w != nil {
		return s.w
	}
	return new(big.Int).Mul(s.d.bigRaw(), bigUnit)
}

// narrow returns the Sum of w/10^36, in the narrow form when it fits.
func narrow(w *big.Int) Sum {
	// 10^18 = 2^18 × 5^18: fewer than 18 trailing zero bits means more than
	// 18 places, without a division (the common wide case: tiny products).
	if w.Sign() != 0 && w.TrailingZeroBits() < Scale {
		return Sum{w: w}
	}
	q, r := new(big.Int).QuoRem(w, bigUnit, new(big.Int))
	if r.Sign() == 0 && q.Cmp(maxRaw) <= 0 && q.Cmp(minRaw) >= 0 {
		return Sum{d: fromBig(q)}
	}
	return Sum{w: w}
}

// fitsRange reports whether s, cut to 18 places, is within the Decimal range.
func (s Sum) fitsRange() bool {
	if s.w == nil {
		return true
	}
	q := new(big.Int).Quo(s.w, bigUnit)
	return q.Cmp(maxRaw) <= 0 && q.Cmp(minRaw) >= 0
}

// bigRaw returns d ×10^18 as a big integer.
func (d Decimal) bigRaw() *big.Int {
	m := d.abs()
	x := new(big.Int).SetUint64(m.hi)
	x.Lsh(x, 64)
	x.Or(x, new(big.Int).SetUint64(m.lo))
	if d.Sign() < 0 {
		x.Neg(x)
	}
	return x
}

// fromBig converts a raw integer known to fit 128 bits two's complement.
func fromBig(x *big.Int) Decimal {
	m := new(big.Int).Abs(x)
	lo := new(big.Int).And(m, new(big.Int).SetUint64(^uint64(0))).Uint64()
	hi := new(big.Int).Rsh(m, 64).Uint64()
	d := Decimal{hi, lo}
	if x.Sign() < 0 {
		d = d.Neg()
	}
	return d
}

// addOK is Add without an error value (the hot path of Sum).
func (a Decimal) addOK(b Decimal) (Decimal, bool) {
	lo, carry := bits.Add64(a.lo, b.lo, 0)
	hi, _ := bits.Add64(a.hi, b.hi, carry)
	if (a.hi^hi)&(b.hi^hi)>>63 != 0 {
		return Decimal{}, false
	}
	return Decimal{hi, lo}, true
}

// String formats s in plain notation without trailing zeros.
func (s Sum) String() string { return string(s.Append(nil)) }

// Append appends the String form of s to dst.
func (s Sum) Append(dst []byte) []byte {
	if s.w == nil {
		return s.d.Append(dst)
	}
	return appendFixed(dst, s.w.Sign() < 0, new(big.Int).Abs(s.w), SumScale)
}

// appendFixed appends ±abs × 10^-scale in plain notation without trailing
// zeros.
func appendFixed(dst []byte, neg bool, abs *big.Int, scale int) []byte {
	if neg {
		dst = append(dst, '-')
	}
	digits := abs.Text(10)
	for len(digits) <= scale {
		digits = "0" + digits
	}
	ip, frac := digits[:len(digits)-scale], digits[len(digits)-scale:]
	end := len(frac)
	for end > 0 && frac[end-1] == '0' {
		end--
	}
	dst = append(dst, ip...)
	if end > 0 {
		dst = append(dst, '.')
		dst = append(dst, frac[:end]...)
	}
	return dst
}

// Errors of ParseSum beyond those of Parse.
var ErrSumPrecision = errors.New("decimal: more than 36 decimal places")

// ParseSum reads a Sum: the syntax of Parse with up to 36 decimal places
// and up to MaxSumDigits digits.
func ParseSum(b []byte) (Sum, error) {
	d, err := parse(b)
	if err == nil {
		return Sum{d: d}, nil
	}
	if !errors.Is(err, ErrPrecision) && !errors.Is(err, ErrRange) {
		return Sum{}, err
	}
	return parseWide(b)
}

func parseWide(b []byte) (Sum, error) {
	i, n := 0, len(b)
	neg := false
	if n > 0 && (b[0] == '-' || b[0] == '+') {
		neg = b[0] == '-'
		i++
	}
	mant := make([]byte, 0, n)
	digits, frac, seenDot := 0, 0, false
	for ; i < n; i++ {
		c := b[i]
		if c == '.' {
			if seenDot {
				return Sum{}, ErrSyntax
			}
			seenDot = true
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		digits++
		if len(mant) == 0 && c == '0' {
			if seenDot {
				frac++
			}
			continue // leading zeros carry no digits
		}
		mant = append(mant, c)
		if seenDot {
			frac++
		}
	}
	if digits == 0 {
		return Sum{}, ErrSyntax
	}
	exp, err := exponent(b[i:])
	if err != nil {
		return Sum{}, err
	}
	// Trailing zeros of the fraction do not count as places.
	dp := frac - exp
	for dp > SumScale && len(mant) > 0 && mant[len(mant)-1] == '0' {
		mant = mant[:len(mant)-1]
		dp--
	}
	if len(mant) == 0 {
		return Sum{}, nil
	}
	if dp > SumScale {
		return Sum{}, ErrSumPrecision
	}
	if len(mant)+(SumScale-dp) > MaxSumDigits+SumScale {
		return Sum{}, ErrRange
	}
	w, _ := new(big.Int).SetString(string(mant), 10)
	w.Mul(w, new(big.Int).Exp(bigTen, big.NewInt(int64(SumScale-dp)), nil))
	if neg {
		w.Neg(w)
	}
	return narrow(w), nil
}

// MustParseSum is ParseSum for constants in tests; it panics on error.
func MustParseSum(s string) Sum {
	v, err := ParseSum([]byte(s))
	if err != nil {
		panic(err)
	}
	return v
}

// MarshalText implements encoding.TextMarshaler.
func (s Sum) MarshalText() ([]byte, error) { return s.Append(nil), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Sum) UnmarshalText(b []byte) error {
	v, err := ParseSum(b)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalJSON writes s as a JSON string, so no reader turns it into a float.
func (s Sum) MarshalJSON() ([]byte, error) {
	b := append([]byte{'"'}, s.Append(nil)...)
	return append(b, '"'), nil
}

// UnmarshalJSON accepts a JSON string or number.
func (s *Sum) UnmarshalJSON(b []byte) error {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		b = b[1 : len(b)-1]
	}
	return s.UnmarshalText(b)
}

// Binary forms (AppendBinary, ReadBinary): a narrow Sum is a 0 byte and its
// 16-byte raw Decimal (big-endian hi, lo); a wide Sum is a 1 or 2 byte
// (positive, negative), a uvarint length and the big-endian magnitude of
// value×10^36.
const (
	binNarrow  = 0
	binWidePos = 1
	binWideNeg = 2
)

// AppendBinary appends the binary form of s.
func (s Sum) AppendBinary(b []byte) []byte {
	if s.w == nil {
		b = append(b, binNarrow)
		b = binary.BigEndian.AppendUint64(b, s.d.hi)
		return binary.BigEndian.AppendUint64(b, s.d.lo)
	}
	tag := byte(binWidePos)
	if s.w.Sign() < 0 {
		tag = binWideNeg
	}
	mag := new(big.Int).Abs(s.w).Bytes()
	b = append(b, tag)
	b = binary.AppendUvarint(b, uint64(len(mag)))
	return append(b, mag...)
}

// ErrBinary is returned by ReadBinary for bytes AppendBinary did not write.
var ErrBinary = errors.New("decimal: corrupt binary sum")

// maxWideBytes bounds the magnitude ReadBinary accepts.
const maxWideBytes = 64

// ReadBinary decodes a Sum written by AppendBinary at the start of b and
// returns the rest of b.
func ReadBinary(b []byte) (Sum, []byte, error) {
	if len(b) == 0 {
		return Sum{}, nil, ErrBinary
	}
	switch b[0] {
	case binNarrow:
		if len(b) < 17 {
			return Sum{}, nil, ErrBinary
		}
		d := Decimal{binary.BigEndian.Uint64(b[1:]), binary.BigEndian.Uint64(b[9:])}
		return Sum{d: d}, b[17:], nil
	case binWidePos, binWideNeg:
		n, k := binary.Uvarint(b[1:])
		if k <= 0 || n == 0 || n > maxWideBytes || uint64(len(b)-1-k) < n {
			return Sum{}, nil, ErrBinary
		}
		mag := b[1+k : 1+k+int(n)]
		w := new(big.Int).SetBytes(mag)
		if b[0] == binWideNeg {
			w.Neg(w)
		}
		return narrow(w), b[1+k+int(n):], nil
	}
	return Sum{}, nil, ErrBinary
}
