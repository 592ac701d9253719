package decimal

import "math/big"

// QuoPlaces is the number of decimal places of a quotient of sums, such
// as a candle's VWAP (quote volume ÷ volume).
const QuoPlaces = 18

// AppendQuo appends num ÷ den in plain notation: the exact quotient when it
// has at most places decimal places, else the quotient rounded half to
// even at the last of them; trailing zeros are trimmed. ok is false (and
// nothing is appended) when den is zero.
func AppendQuo(dst []byte, num, den Sum, places int) (_ []byte, ok bool) {
	d := den.wide()
	if d.Sign() == 0 {
		return dst, false
	}
	n := num.wide()
	neg := n.Sign()*d.Sign() < 0
	n = new(big.Int).Mul(new(big.Int).Abs(n), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(places)), nil))
	d = new(big.Int).Abs(d)
	q, r := new(big.Int).QuoRem(n, d, new(big.Int))
	switch new(big.Int).Lsh(r, 1).Cmp(d) {
	case 1:
		q.Add(q, big.NewInt(1))
	case 0:
		if q.Bit(0) == 1 {
			q.Add(q, big.NewInt(1))
		}
	}
	return appendFixed(dst, neg && q.Sign() != 0, q, places), true
}
