package s3parquet

import (
	"fmt"
	"net/url"
	"time"
)

// ObjectName is the file name of every partition's one object.
const ObjectName = "candles.parquet"

// EscapeSymbol makes a symbol safe as one path segment: bytes outside
// A–Z a–z 0–9 - _ . ~ become %XX with upper-case hex ("BTC/USDT" →
// "BTC%2FUSDT"). UnescapeSymbol and url.PathUnescape reverse it.
func EscapeSymbol(sym string) string {
	const hex = "0123456789ABCDEF"
	n := 0
	for i := 0; i < len(sym); i++ {
		if !unreserved(sym[i]) {
			n++
		}
	}
	if n == 0 {
		return sym
	}
	b := make([]byte, 0, len(sym)+2*n)
	for i := 0; i < len(sym); i++ {
		c := sym[i]
		if unreserved(c) {
			b = append(b, c)
		} else {
			b = append(b, '%', hex[c>>4], hex[c&15])
		}
	}
	return string(b)
}

// UnescapeSymbol reverses EscapeSymbol.
func UnescapeSymbol(s string) (string, error) { return url.PathUnescape(s) }

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '_' || c == '.' || c == '~'
}

// PartitionPath returns the object path of the (timeframe, symbol, UTC day
// of openTime) partition, relative to the lake's prefix:
// timeframe=1m/symbol=BTC%2FUSDT/year=2026/month=11/day=23/candles.parquet.
func PartitionPath(timeframe, symbol string, openTime int64) string {
	y, m, d := time.UnixMilli(openTime).UTC().Date()
	return fmt.Sprintf("timeframe=%s/symbol=%s/year=%04d/month=%02d/day=%02d/%s",
		EscapeSymbol(timeframe), EscapeSymbol(symbol), y, int(m), d, ObjectName)
}

// dayOf returns the UTC day number (days since 1970-01-01) of ms.
func dayOf(ms int64) int64 {
	d := ms / 86_400_000
	if ms%86_400_000 < 0 {
		d--
	}
	return d
}
