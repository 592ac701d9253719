package processors

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
)

// testClock is a Clock the tests move by hand.
type testClock struct{ t time.Time }

func (c *testClock) Now() time.Time { return c.t }

// processor is what Aggregator and Rollup have in common.
type processor interface {
	Process(rec Record, out *Output)
	Tick(out *Output)
	ResetIdle()
	Active(fn func(c *candle.Candle))
	Changes(fn func(key, val []byte))
	Restore(key, val []byte) error
}

// store plays the engine's part: it applies Changes like the Pebble state.
type store map[string][]byte

func (s store) apply(p processor) {
	p.Changes(func(k, v []byte) {
		if v == nil {
			delete(s, string(k))
			return
		}
		s[string(k)] = slices.Clone(v)
	})
}

// restoreInto restores every entry of s into p in a random order.
func (s store) restoreInto(t testing.TB, p processor, rng *rand.Rand) {
	t.Helper()
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if rng != nil {
		rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	}
	for _, k := range keys {
		if err := p.Restore([]byte(k), s[k]); err != nil {
			t.Fatalf("restore %q: %v", k, err)
		}
	}
}

// baseDay is the date fixtures' HH:MM:SS times refer to (a Monday).
var baseDay = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// fmtTime prints a window open time: HH:MM:SS on baseDay, else the full date.
func fmtTime(ms int64) string {
	t := time.UnixMilli(ms).UTC()
	if t.Truncate(24*time.Hour).Equal(baseDay) && t.Nanosecond() == 0 {
		return t.Format("15:04:05")
	}
	return t.Format("2006-01-02T15:04:05")
}

// parseTime reads HH:MM:SS (on baseDay), 2006-01-02T15:04:05 or RFC 3339.
func parseTime(s string) (time.Time, error) {
	if t, err := time.Parse("15:04:05", s); err == nil {
		return baseDay.Add(time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute +
			time.Duration(t.Second())*time.Second), nil
	}
	if t, err := time.Parse("2006-01-02T15:04:05", s); err == nil {
		return t, nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

// fmtCandle prints one candle on one line. Day and longer windows also show
// their length, so 23 h and 25 h DST days are visible.
func fmtCandle(c *candle.Candle) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", c.Symbol, c.Timeframe, fmtTime(c.OpenTime))
	if d := time.Duration(c.CloseTime-c.OpenTime) * time.Millisecond; d >= 23*time.Hour {
		fmt.Fprintf(&b, " (%s)", fmtDur(d))
	}
	fmt.Fprintf(&b, " o=%s h=%s l=%s c=%s v=%s q=%s n=%d", c.Open, c.High, c.Low, c.Close, c.Volume, c.QuoteVolume, c.Trades)
	if c.Taker { // taker buy base and quote volumes
		fmt.Fprintf(&b, " tb=%s tq=%s", c.TakerBuyVolume, c.TakerBuyQuoteVolume)
	}
	if c.FirstTradeID != "" || c.LastTradeID != "" { // first and last trade ids
		fmt.Fprintf(&b, " ids=%s..%s", cmp.Or(c.FirstTradeID, "-"), cmp.Or(c.LastTradeID, "-"))
	}
	if c.Gap {
		b.WriteString(" gap")
	}
	if c.Rev > 0 {
		fmt.Fprintf(&b, " rev=%d", c.Rev)
	}
	return b.String()
}

func fmtDur(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return fmt.Sprintf("%dh", d/time.Hour)
}

func fmtRejection(r *Rejection) string {
	key := ""
	if r.Key != "" {
		key = " " + r.Key
		if candle.KeyProblem([]byte(r.Key)) != "" {
			key = " " + strconv.Quote(r.Key) // keep fixtures printable text
		}
	}
	return fmt.Sprintf("reject %s%s offset=%d: %s", r.Reason, key, r.Offset, r.Detail)
}

// fmtOutput prints rejections then candles, one per line.
func fmtOutput(b *strings.Builder, out *Output) {
	for i := range out.Rejected {
		b.WriteString(fmtRejection(&out.Rejected[i]))
		b.WriteByte('\n')
	}
	for i := range out.Candles {
		b.WriteString(fmtCandle(&out.Candles[i]))
		b.WriteByte('\n')
	}
	for _, m := range out.Quiet {
		fmt.Fprintf(b, "quiet %s until=%s\n", m.Key, fmtTime(m.Until))
	}
}
