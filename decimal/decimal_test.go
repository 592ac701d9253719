package decimal

import (
	"errors"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestParseAndString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0", "0"}, {"1", "1"}, {"0.1", "0.1"}, {"-2.250", "-2.25"}, {"65000.10", "65000.1"},
		{"1e-7", "0.0000001"}, {"1.5E3", "1500"}, {"+3", "3"}, {"000.000", "0"},
		{"0.000000000000000001", "0.000000000000000001"},
		{"170141183460469231731.687303715884105727", "170141183460469231731.687303715884105727"},
		{"1.10000000000000000000000", "1.1"}, {".5", "0.5"}, {"5.", "5"},
		{"10000000000000.00000000000000000000000000", "10000000000000"}, // found by FuzzParse
		{"1.00000000000000000000000000000000000000000000000000000", "1"},
	} {
		d, err := Parse([]byte(tc.in))
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.in, err)
		}
		if got := d.String(); got != tc.want {
			t.Errorf("Parse(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want error
	}{
		{"", ErrSyntax}, {"abc", ErrSyntax}, {"1.2.3", ErrSyntax}, {"NaN", ErrSyntax}, {"Infinity", ErrSyntax},
		{"1e", ErrSyntax}, {"12x", ErrSyntax}, {"-", ErrSyntax}, {".", ErrSyntax},
		{"0.0000000000000000001", ErrPrecision},
		{"170141183460469231732", ErrRange}, {"1e400", ErrRange}, {"1e21", ErrRange},
		{"1.0000000000000000000000000000000000000001", ErrPrecision}, {"1000000000000000000000.0000000000000000000", ErrRange},
	} {
		if _, err := Parse([]byte(tc.in)); !errors.Is(err, tc.want) {
			t.Errorf("Parse(%q) error = %v, want %v", tc.in, err, tc.want)
		}
	}
}

// The contract's example: ten trades of qty 0.1 give volume 1 exactly.
func TestTenTenthsMakeOne(t *testing.T) {
	sum := Zero
	for range 10 {
		var err error
		if sum, err = sum.Add(MustParse("0.1")); err != nil {
			t.Fatal(err)
		}
	}
	if sum.String() != "1" || sum.Cmp(FromInt(1)) != 0 {
		t.Fatalf("sum = %s, want 1", sum)
	}
}

func TestMulExactOrError(t *testing.T) {
	got, err := MustParse("65000.12").Mul(MustParse("0.00000003"))
	if err != nil || got.String() != "0.0019500036" {
		t.Fatalf("got %v %v", got, err)
	}
	if _, err := MustParse("0.000000001").Mul(MustParse("0.0000000001")); !errors.Is(err, ErrPrecision) {
		t.Fatalf("19 places: err = %v", err)
	}
	if _, err := MustParse("100000000000").Mul(MustParse("100000000000")); !errors.Is(err, ErrRange) {
		t.Fatalf("overflow: err = %v", err)
	}
	if got, _ := MustParse("-1.5").Mul(MustParse("2")); got.String() != "-3" {
		t.Fatalf("sign: %s", got)
	}
}

func TestAddOverflow(t *testing.T) {
	max := MustParse("170141183460469231731.687303715884105727")
	if _, err := max.Add(MustParse("0.000000000000000001")); !errors.Is(err, ErrRange) {
		t.Fatalf("err = %v", err)
	}
}

// Random values checked against math/big: Add, Mul and Cmp agree exactly.
func TestAgainstBig(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	scale := new(big.Int).Exp(big.NewInt(10), big.NewInt(Scale), nil)
	toBig := func(d Decimal) *big.Rat {
		hi, lo := d.Raw()
		v := new(big.Int).Lsh(new(big.Int).SetUint64(hi), 64)
		v.Or(v, new(big.Int).SetUint64(lo))
		if int64(hi) < 0 {
			v.Sub(v, new(big.Int).Lsh(big.NewInt(1), 128))
		}
		return new(big.Rat).SetFrac(v, scale)
	}
	gen := func() Decimal {
		m := r.Int64N(2_000_000_000) - 1_000_000_000
		dp := r.IntN(9)
		s := big.NewRat(m, int64(pow10[dp])).FloatString(dp)
		return MustParse(s)
	}
	for range 20000 {
		a, b := gen(), gen()
		sum, err := a.Add(b)
		if err != nil {
			t.Fatal(err)
		}
		if toBig(sum).Cmp(new(big.Rat).Add(toBig(a), toBig(b))) != 0 {
			t.Fatalf("%s + %s = %s", a, b, sum)
		}
		prod, err := a.Mul(b)
		if err != nil {
			t.Fatal(err)
		}
		if toBig(prod).Cmp(new(big.Rat).Mul(toBig(a), toBig(b))) != 0 {
			t.Fatalf("%s * %s = %s", a, b, prod)
		}
		if a.Cmp(b) != toBig(a).Cmp(toBig(b)) {
			t.Fatalf("Cmp(%s, %s)", a, b)
		}
		if back := MustParse(a.String()); back != a {
			t.Fatalf("round trip %s", a)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	in := []byte("65432.12345678")
	for b.Loop() {
		if _, err := Parse(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMul(b *testing.B) {
	p, q := MustParse("65432.12345678"), MustParse("0.00123")
	for b.Loop() {
		if _, err := p.Mul(q); err != nil {
			b.Fatal(err)
		}
	}
}

// Values whose integer part needs more than 64 bits take the slow path and
// still format exactly.
func TestAppendLargeIntegerPart(t *testing.T) {
	for _, s := range []string{"18446744073709551616", "-170141183460469231731.687303715884105727", "99999999999999999999.5"} {
		if got := MustParse(s).String(); got != s {
			t.Errorf("%s formats as %s", s, got)
		}
	}
}

func BenchmarkAppend(b *testing.B) {
	d := MustParse("65432.12345678")
	buf := make([]byte, 0, 64)
	for b.Loop() {
		buf = d.Append(buf[:0])
	}
}

// Append writes every fraction exactly as the digit-by-digit formatter
// (appendSlow) does: every number of places from 1 to 18, every count of
// trailing zeros, signs, and random values.
func TestAppendFractionDigits(t *testing.T) {
	check := func(d Decimal) {
		t.Helper()
		want := []byte{}
		if d.Sign() < 0 {
			want = append(want, '-')
		}
		want = d.abs().appendSlow(want)
		if got := d.Append(nil); string(got) != string(want) {
			t.Fatalf("Append(%#x:%#x) = %s, want %s", d.hi, d.lo, got, want)
		}
	}
	for places := 1; places <= Scale; places++ {
		for _, digits := range []string{"1", "9", "12", "105", "123456789", "100000000000000001", "999999999999999999"} {
			if len(digits) > places {
				continue
			}
			for _, ip := range []string{"0", "7", "65432", "18446744073"} {
				s := ip + "." + strings.Repeat("0", places-len(digits)) + digits
				d := MustParse(s)
				check(d)
				check(d.Neg())
				if got := d.String(); got != strings.TrimRight(strings.TrimRight(s, "0"), ".") {
					t.Fatalf("%s formats as %s", s, got)
				}
			}
		}
	}
	for _, hi := range []uint64{0, 1, 1<<18 - 1, 1 << 18, 1<<18 + 1, 1 << 40} { // small and large integer parts
		for _, lo := range []uint64{0, 1, unit - 1, unit, 1<<64 - 1, 1 << 63} {
			check(Decimal{hi, lo})
			check(Decimal{hi, lo}.Neg())
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		d := Decimal{rng.Uint64() >> (1 + rng.IntN(64)), rng.Uint64()}
		if rng.IntN(4) == 0 {
			d = Decimal{0, rng.Uint64() % 1e18 * pow10[rng.IntN(2)]}
		}
		check(d)
		check(d.Neg())
	}
}
