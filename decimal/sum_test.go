package decimal

import (
	"errors"
	"math/big"
	"regexp"
	"testing"
)

func rat(t testing.TB, s string) *big.Rat {
	t.Helper()
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		t.Fatalf("big.Rat cannot read %q", s)
	}
	return r
}

// The inputs of the issue: each product needs more than 18 places or more
// than 128 bits, and the Sum keeps every digit.
func TestProductExact(t *testing.T) {
	for _, tc := range []struct{ p, q, want string }{
		{"8356.7124", "61.674945886431317500", "515399.785058469582700587"},
		{"0.000000000000000001", "0.000000000000000001", "0.000000000000000000000000000000000001"},
		{"170141183460469231731.687303715884105727", "170141183460469231731.687303715884105727",
			"28948022309329048855892746252171976962977.213799489202546401021394546514198529"},
		{"2", "3", "6"},
	} {
		got := Product(MustParse(tc.p), MustParse(tc.q))
		if got.String() != tc.want {
			t.Errorf("%s × %s = %s, want %s", tc.p, tc.q, got, tc.want)
		}
		want := new(big.Rat).Mul(rat(t, tc.p), rat(t, tc.q))
		if got.Rat().Cmp(want) != 0 {
			t.Errorf("%s × %s = %s, math/big says %s", tc.p, tc.q, got, want.FloatString(40))
		}
	}
}

func TestSumNarrowsBack(t *testing.T) {
	a := Product(MustParse("0.5"), MustParse("0.000000000000000001")) // 19 places: wide
	if !a.IsWide() {
		t.Fatalf("%s should be wide", a)
	}
	s := a.Add(a) // 0.000000000000000001: fits 18 places again
	if s.IsWide() || s != SumOf(MustParse("0.000000000000000001")) {
		t.Fatalf("sum %s (wide %v) should narrow to the Decimal 1e-18", s, s.IsWide())
	}
	// Overflow of the 128-bit range widens instead of failing.
	max := MustParse("170141183460469231731.687303715884105727")
	o := SumOf(max).AddDecimal(max)
	if !o.IsWide() || o.String() != "340282366920938463463.374607431768211454" {
		t.Fatalf("max+max = %s (wide %v)", o, o.IsWide())
	}
	if back := o.Add(SumOf(max.Neg())); back.IsWide() || back != SumOf(max) {
		t.Fatalf("max+max-max = %s (wide %v), want %s narrow", back, back.IsWide(), max)
	}
}

func TestParseSum(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"1", "1"}, {"0.000000000000000000000000000000000001", "0.000000000000000000000000000000000001"},
		{"515399.2305958452596719447747", "515399.2305958452596719447747"},
		{"1e30", "1000000000000000000000000000000"}, {"-12.5e-30", "-0.0000000000000000000000000000125"},
		{"0.0000000000000000000000000000000000010000", "0.000000000000000000000000000000000001"},
		{"000", "0"},
	} {
		s, err := ParseSum([]byte(tc.in))
		if err != nil {
			t.Fatalf("ParseSum(%q): %v", tc.in, err)
		}
		if s.String() != tc.want {
			t.Errorf("ParseSum(%q) = %s, want %s", tc.in, s, tc.want)
		}
	}
	for _, tc := range []struct {
		in   string
		want error
	}{
		{"0.0000000000000000000000000000000000001", ErrSumPrecision},
		{"1e200", ErrRange}, {"1e9999", ErrRange}, {"1..2", ErrSyntax}, {"", ErrSyntax}, {"1e", ErrSyntax},
		{"12345678901234567890123x", ErrSyntax}, {"-", ErrSyntax},
	} {
		if _, err := ParseSum([]byte(tc.in)); !errors.Is(err, tc.want) {
			t.Errorf("ParseSum(%q) error = %v, want %v", tc.in, err, tc.want)
		}
	}
}

func TestSumBinaryRoundTrip(t *testing.T) {
	for _, s := range []string{"0", "1.5", "-3", "515399.2305958452596719447747", "-0.000000000000000000000000000000000001",
		"28948022309329048855892746252171976962977.213799489202546401021394546514198529"} {
		v := MustParseSum(s)
		b := v.AppendBinary([]byte{9})
		got, rest, err := ReadBinary(b[1:])
		if err != nil || len(rest) != 0 || !got.Equal(v) || got.String() != s {
			t.Errorf("binary round trip of %s: got %s rest %d err %v", s, got, len(rest), err)
		}
	}
	for _, bad := range [][]byte{nil, {0, 1}, {1}, {1, 0}, {1, 5, 1}, {3}, {1, 200, 1}} {
		if _, _, err := ReadBinary(bad); !errors.Is(err, ErrBinary) {
			t.Errorf("ReadBinary(%v) error = %v, want ErrBinary", bad, err)
		}
	}
}

func TestSumJSON(t *testing.T) {
	v := MustParseSum("515399.2305958452596719447747")
	b, _ := v.MarshalJSON()
	var got Sum
	if err := got.UnmarshalJSON(b); err != nil || !got.Equal(v) {
		t.Fatalf("JSON round trip %s: %s, %v", b, got, err)
	}
}

var plainNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]*[1-9])?$`)

// FuzzParse: whatever Parse accepts formats to a canonical plain number that
// parses back to the same value, and equals what math/big reads.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"0", "1.5", "-2.250", "1e-7", "0.000000000000000001", "8356.7124",
		"61.674945886431317500", "170141183460469231731.687303715884105727", "1e21", ".5", "5.", "+1E+3"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Parse(b)
		s, serr := ParseSum(b)
		if err != nil {
			if serr == nil {
				if _, ok := s.Decimal(); ok {
					t.Fatalf("Parse(%q) failed (%v) but ParseSum read the narrow %s", b, err, s)
				}
			}
			return
		}
		if serr != nil || s != SumOf(d) {
			t.Fatalf("ParseSum(%q) = %s, %v; Parse gave %s", b, s, serr, d)
		}
		out := d.String()
		if !plainNumber.MatchString(out) {
			t.Fatalf("Parse(%q) formats as %q, not a plain number", b, out)
		}
		back, err := Parse([]byte(out))
		if err != nil || back != d {
			t.Fatalf("round trip of %q: %q → %s, %v", b, out, back, err)
		}
		if r, ok := new(big.Rat).SetString(out); !ok || r.Cmp(new(big.Rat).SetFrac(d.bigRaw(), bigUnit)) != 0 {
			t.Fatalf("%q: math/big disagrees", out)
		}
	})
}

// FuzzSum: sums of products of accepted Decimals are exact (math/big is the
// reference), whatever their size; they format and parse back unchanged.
func FuzzSum(f *testing.F) {
	f.Add([]byte("8356.7124"), []byte("61.674945886431317500"), []byte("0.000000000000000001"), []byte("3"))
	f.Add([]byte("170141183460469231731.687303715884105727"), []byte("170141183460469231731"), []byte("-1"), []byte("1e-18"))
	f.Add([]byte("0.1"), []byte("0.1"), []byte("0.1"), []byte("0.1"))
	f.Fuzz(func(t *testing.T, a, b, c, d []byte) {
		var xs [4]Decimal
		for i, in := range [][]byte{a, b, c, d} {
			v, err := Parse(in)
			if err != nil {
				return
			}
			xs[i] = v
		}
		want := new(big.Rat)
		r := func(x Decimal) *big.Rat { return new(big.Rat).SetFrac(x.bigRaw(), bigUnit) }
		s := Product(xs[0], xs[1])
		want.Add(want, new(big.Rat).Mul(r(xs[0]), r(xs[1])))
		s = s.Add(Product(xs[2], xs[3]))
		want.Add(want, new(big.Rat).Mul(r(xs[2]), r(xs[3])))
		s = s.AddDecimal(xs[0])
		want.Add(want, r(xs[0]))
		s = s.Add(s)
		want.Add(want, want)
		if s.Rat().Cmp(want) != 0 {
			t.Fatalf("sum %s, math/big %s", s, want.FloatString(40))
		}
		txt := s.String()
		back, err := ParseSum([]byte(txt))
		if err != nil || !back.Equal(s) || back.IsWide() != s.IsWide() {
			t.Fatalf("text round trip of %s: %s, %v", txt, back, err)
		}
		bin, rest, err := ReadBinary(s.AppendBinary(nil))
		if err != nil || len(rest) != 0 || !bin.Equal(s) {
			t.Fatalf("binary round trip of %s: %s, %v", txt, bin, err)
		}
		if _, ok := s.Decimal(); ok == s.IsWide() {
			t.Fatalf("%s: Decimal ok = %v but IsWide = %v", txt, ok, s.IsWide())
		}
	})
}

func TestInInputRange(t *testing.T) {
	for _, tc := range []struct {
		s  string
		in bool
	}{{"99999999999999999999.999999999999999999", true}, {"100000000000000000000", false},
		{"-99999999999999999999.999999999999999999", true}, {"-100000000000000000000", false},
		{"170141183460469231731", false}, {"0", true}, {"0.000000000000000001", true}} {
		if got := MustParse(tc.s).InInputRange(); got != tc.in {
			t.Errorf("%s: InInputRange = %v, want %v", tc.s, got, tc.in)
		}
	}
}
