package decimal

import "testing"

// TestAppendQuo: exact quotients are exact, others round half to even at
// the last place, zero divisors are refused, wide sums divide exactly.
func TestAppendQuo(t *testing.T) {
	for _, c := range []struct {
		num, den string
		places   int
		want     string
	}{
		{"65.25", "3", 18, "21.75"},
		{"10", "3", 18, "3.333333333333333333"},
		{"20", "3", 18, "6.666666666666666667"},
		{"1", "8", 2, "0.12"}, // 0.125: half, to even
		{"3", "8", 2, "0.38"}, // 0.375: half, to even
		{"-3", "8", 2, "-0.38"},
		{"1", "400", 2, "0"}, // rounds to zero: no sign
		{"0", "5", 18, "0"},
		{"123456789012345678901234.123456789012345678901234567890123456", "1", 36, "123456789012345678901234.123456789012345678901234567890123456"},
		{"0.000000000000000000000000000000000001", "0.000000000000000000000000000000000003", 18, "0.333333333333333333"},
	} {
		got, ok := AppendQuo(nil, MustParseSum(c.num), MustParseSum(c.den), c.places)
		if !ok || string(got) != c.want {
			t.Errorf("%s ÷ %s (%d places) = %s %v, want %s", c.num, c.den, c.places, got, ok, c.want)
		}
	}
	if got, ok := AppendQuo([]byte("x"), MustParseSum("1"), Sum{}, 18); ok || string(got) != "x" {
		t.Errorf("÷ 0: %q %v", got, ok)
	}
}
