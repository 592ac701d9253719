package topotest

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/processors"
)

// candle fields an expectation may give, as bits of wantCandle.set.
const (
	fSymbol = 1 << iota
	fTimeframe
	fOpenTime
	fCloseTime
	fOpen
	fHigh
	fLow
	fClose
	fVolume
	fQuoteVolume
	fTrades
	fGap
	fTakerBase
	fTakerQuote
	fFirstID
	fLastID
	fRev
)

var candleFields = map[string]int{
	"symbol": fSymbol, "timeframe": fTimeframe, "open_time": fOpenTime, "close_time": fCloseTime,
	"open": fOpen, "high": fHigh, "low": fLow, "close": fClose, "volume": fVolume,
	"quote_volume": fQuoteVolume, "trades": fTrades, "gap": fGap,
	"taker_buy_base_volume": fTakerBase, "taker_buy_quote_volume": fTakerQuote,
	"first_trade_id": fFirstID, "last_trade_id": fLastID, "rev": fRev,
}

// wantCandle is an expected candle: the fields in set are compared.
type wantCandle struct {
	c    candle.Candle
	set  int
	line int
}

// parseWantCandle reads one expected candle mapping.
func parseWantCandle(n *yaml.Node) (wantCandle, error) {
	w := wantCandle{line: n.Line}
	if n.Kind != yaml.MappingNode {
		return w, errAt(n, "an expected candle is a mapping like {symbol: BTC, open_time: \"2026-01-01T00:00:00Z\", close: \"101\"}")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		bit, ok := candleFields[k.Value]
		if !ok {
			return w, errAt(k, "unknown candle field %q%s", k.Value, didYouMean(k.Value, slices.Sorted(maps.Keys(candleFields))))
		}
		if v.Kind != yaml.ScalarNode {
			return w, errAt(v, "%s must be a single value", k.Value)
		}
		var err error
		switch bit {
		case fSymbol:
			w.c.Symbol = v.Value
		case fTimeframe:
			w.c.Timeframe = v.Value
		case fOpenTime:
			w.c.OpenTime, err = parseTime(v)
		case fCloseTime:
			w.c.CloseTime, err = parseTime(v)
		case fOpen, fHigh, fLow, fClose:
			var d decimal.Decimal
			if d, err = decimal.Parse([]byte(v.Value)); err != nil {
				err = errAt(v, "%s: %q is not a decimal number", k.Value, v.Value)
			}
			*w.dec(bit) = d
		case fVolume, fQuoteVolume:
			var s decimal.Sum
			if s, err = decimal.ParseSum([]byte(v.Value)); err != nil {
				err = errAt(v, "%s: %q is not a decimal number", k.Value, v.Value)
			}
			if bit == fVolume {
				w.c.Volume = s
			} else {
				w.c.QuoteVolume = s
			}
		case fTrades:
			if w.c.Trades, err = strconv.ParseInt(v.Value, 10, 64); err != nil || w.c.Trades < 0 {
				err = errAt(v, "trades must be a whole number ≥ 0, not %q", v.Value)
			}
		case fRev:
			var rev uint64
			if rev, err = strconv.ParseUint(v.Value, 10, 32); err != nil {
				err = errAt(v, "rev must be a whole number ≥ 0 (0: the first final of the window, then one more per revision), not %q", v.Value)
			}
			w.c.Rev = uint32(rev)
		case fGap:
			if w.c.Gap, err = strconv.ParseBool(strings.ToLower(v.Value)); err != nil {
				err = errAt(v, "gap must be true or false, not %q", v.Value)
			}
		case fTakerBase, fTakerQuote: // null: the candle has no taker volumes
			var s decimal.Sum
			if v.Tag != "!!null" {
				if s, err = decimal.ParseSum([]byte(v.Value)); err != nil {
					err = errAt(v, "%s: %q is not a decimal number (or null: none)", k.Value, v.Value)
				}
				w.c.Taker = true
			}
			if bit == fTakerBase {
				w.c.TakerBuyVolume = s
			} else {
				w.c.TakerBuyQuoteVolume = s
			}
		case fFirstID, fLastID: // null: none
			id := v.Value
			if v.Tag == "!!null" {
				id = ""
			}
			if bit == fFirstID {
				w.c.FirstTradeID = id
			} else {
				w.c.LastTradeID = id
			}
		}
		if err != nil {
			return w, err
		}
		w.set |= bit
	}
	return w, nil
}

func (w *wantCandle) dec(bit int) *decimal.Decimal {
	switch bit {
	case fOpen:
		return &w.c.Open
	case fHigh:
		return &w.c.High
	case fLow:
		return &w.c.Low
	}
	return &w.c.Close
}

// mismatches lists the given fields on which got differs.
func (w *wantCandle) mismatches(got *candle.Candle) []string {
	var out []string
	add := func(bit int, name string, want, have string, eq bool) {
		if w.set&bit != 0 && !eq {
			out = append(out, fmt.Sprintf("%s: want %s, got %s", name, want, have))
		}
	}
	c := &w.c
	add(fSymbol, "symbol", c.Symbol, got.Symbol, c.Symbol == got.Symbol)
	add(fTimeframe, "timeframe", c.Timeframe, got.Timeframe, c.Timeframe == got.Timeframe)
	add(fOpenTime, "open_time", fmtTime(c.OpenTime), fmtTime(got.OpenTime), c.OpenTime == got.OpenTime)
	add(fCloseTime, "close_time", fmtTime(c.CloseTime), fmtTime(got.CloseTime), c.CloseTime == got.CloseTime)
	for _, d := range []struct {
		bit       int
		name      string
		want, got decimal.Sum
	}{{fOpen, "open", decimal.SumOf(c.Open), decimal.SumOf(got.Open)}, {fHigh, "high", decimal.SumOf(c.High), decimal.SumOf(got.High)},
		{fLow, "low", decimal.SumOf(c.Low), decimal.SumOf(got.Low)},
		{fClose, "close", decimal.SumOf(c.Close), decimal.SumOf(got.Close)}, {fVolume, "volume", c.Volume, got.Volume},
		{fQuoteVolume, "quote_volume", c.QuoteVolume, got.QuoteVolume}} {
		add(d.bit, d.name, d.want.String(), d.got.String(), d.want.Cmp(d.got) == 0)
	}
	add(fTrades, "trades", strconv.FormatInt(c.Trades, 10), strconv.FormatInt(got.Trades, 10), c.Trades == got.Trades)
	add(fGap, "gap", strconv.FormatBool(c.Gap), strconv.FormatBool(got.Gap), c.Gap == got.Gap)
	add(fRev, "rev", strconv.FormatUint(uint64(c.Rev), 10), strconv.FormatUint(uint64(got.Rev), 10), c.Rev == got.Rev)
	taker := func(has bool, s decimal.Sum) string {
		if !has {
			return "null"
		}
		return s.String()
	}
	for _, d := range []struct {
		bit       int
		name      string
		want, got decimal.Sum
	}{{fTakerBase, "taker_buy_base_volume", c.TakerBuyVolume, got.TakerBuyVolume},
		{fTakerQuote, "taker_buy_quote_volume", c.TakerBuyQuoteVolume, got.TakerBuyQuoteVolume}} {
		add(d.bit, d.name, taker(c.Taker, d.want), taker(got.Taker, d.got), c.Taker == got.Taker && d.want.Cmp(d.got) == 0)
	}
	id := func(s string) string { return cmp.Or(s, "null") }
	add(fFirstID, "first_trade_id", id(c.FirstTradeID), id(got.FirstTradeID), c.FirstTradeID == got.FirstTradeID)
	add(fLastID, "last_trade_id", id(c.LastTradeID), id(got.LastTradeID), c.LastTradeID == got.LastTradeID)
	return out
}

func (w *wantCandle) matches(got *candle.Candle) bool { return len(w.mismatches(got)) == 0 }

// sameWindow reports whether got is plausibly the candle w describes (same
// key and window where given), so a diff can explain the fields that differ.
func (w *wantCandle) sameWindow(got *candle.Candle) bool {
	if w.set&(fSymbol|fOpenTime) == 0 {
		return false
	}
	return (w.set&fSymbol == 0 || w.c.Symbol == got.Symbol) && (w.set&fOpenTime == 0 || w.c.OpenTime == got.OpenTime)
}

// String formats the given fields in the compact one-line form of formatCandle.
func (w *wantCandle) String() string {
	c, s := &w.c, w.set
	var parts []string
	opt := func(bit int, v string) {
		if s&bit != 0 {
			parts = append(parts, v)
		}
	}
	opt(fSymbol, c.Symbol)
	opt(fTimeframe, c.Timeframe)
	opt(fOpenTime, fmtTime(c.OpenTime))
	opt(fCloseTime, "until="+fmtTime(c.CloseTime))
	opt(fOpen, "o="+c.Open.String())
	opt(fHigh, "h="+c.High.String())
	opt(fLow, "l="+c.Low.String())
	opt(fClose, "c="+c.Close.String())
	opt(fVolume, "v="+c.Volume.String())
	opt(fQuoteVolume, "q="+c.QuoteVolume.String())
	opt(fTrades, "n="+strconv.FormatInt(c.Trades, 10))
	opt(fTakerBase, "tb="+c.TakerBuyVolume.String())
	opt(fTakerQuote, "tq="+c.TakerBuyQuoteVolume.String())
	opt(fFirstID, "first_id="+c.FirstTradeID)
	opt(fLastID, "last_id="+c.LastTradeID)
	opt(fRev, "rev="+strconv.FormatUint(uint64(c.Rev), 10))
	if s&fGap != 0 {
		if c.Gap {
			parts = append(parts, "gap")
		} else {
			parts = append(parts, "gap=false")
		}
	}
	return strings.Join(parts, " ")
}

// formatCandle is the compact one-line form of a produced candle.
func formatCandle(c *candle.Candle) string {
	s := fmt.Sprintf("%s %s %s o=%s h=%s l=%s c=%s v=%s q=%s n=%d", c.Symbol, c.Timeframe, fmtTime(c.OpenTime),
		c.Open, c.High, c.Low, c.Close, c.Volume, c.QuoteVolume, c.Trades)
	if c.Taker {
		s += fmt.Sprintf(" tb=%s tq=%s", c.TakerBuyVolume, c.TakerBuyQuoteVolume)
	}
	if c.FirstTradeID != "" || c.LastTradeID != "" {
		s += fmt.Sprintf(" first_id=%s last_id=%s", c.FirstTradeID, c.LastTradeID)
	}
	if c.Gap {
		s += " gap"
	}
	if c.Rev > 0 {
		s += fmt.Sprintf(" rev=%d", c.Rev)
	}
	return s
}

// deadLetter is one rejection with the stage that made it.
type deadLetter struct {
	stage string
	r     processors.Rejection
}

func formatDeadLetter(d *deadLetter) string {
	s := fmt.Sprintf("%s %s p%d@%d", d.stage, d.r.Reason, d.r.Partition, d.r.Offset)
	if d.r.Key != "" {
		s += " " + d.r.Key
	}
	if d.r.Detail != "" {
		s += ": " + d.r.Detail
	}
	return s
}

// wantDeadLetter is an expected rejection; empty/negative fields are not compared.
type wantDeadLetter struct {
	stage, reason, key, detail string
	partition, offset          int64 // -1: not given
	line                       int
}

var deadLetterFields = []string{"stage", "reason", "partition", "offset", "key", "detail"}

func parseWantDeadLetter(n *yaml.Node) (wantDeadLetter, error) {
	w := wantDeadLetter{partition: -1, offset: -1, line: n.Line}
	if n.Kind != yaml.MappingNode {
		return w, errAt(n, "an expected dead letter is a mapping like {reason: late, partition: 0, offset: 4}")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if v.Kind != yaml.ScalarNode {
			return w, errAt(v, "%s must be a single value", k.Value)
		}
		switch k.Value {
		case "stage":
			w.stage = v.Value
		case "reason":
			w.reason = v.Value
			if !knownReason(v.Value) {
				return w, errAt(v, "unknown reason %q%s", v.Value, didYouMean(v.Value, reasonNames()))
			}
		case "key":
			w.key = v.Value
		case "detail":
			w.detail = v.Value
		case "partition", "offset":
			x, err := strconv.ParseInt(v.Value, 10, 64)
			if err != nil || x < 0 {
				return w, errAt(v, "%s must be a whole number ≥ 0, not %q", k.Value, v.Value)
			}
			if k.Value == "partition" {
				w.partition = x
			} else {
				w.offset = x
			}
		default:
			return w, errAt(k, "unknown dead letter field %q%s", k.Value, didYouMean(k.Value, deadLetterFields))
		}
	}
	return w, nil
}

func (w *wantDeadLetter) matches(d *deadLetter) bool {
	return (w.stage == "" || w.stage == d.stage) && (w.reason == "" || w.reason == string(d.r.Reason)) &&
		(w.key == "" || w.key == d.r.Key) && (w.detail == "" || strings.Contains(d.r.Detail, w.detail)) &&
		(w.partition < 0 || w.partition == int64(d.r.Partition)) && (w.offset < 0 || w.offset == d.r.Offset)
}

func (w *wantDeadLetter) String() string {
	var parts []string
	if w.stage != "" {
		parts = append(parts, w.stage)
	}
	if w.reason != "" {
		parts = append(parts, w.reason)
	}
	switch {
	case w.partition >= 0 && w.offset >= 0:
		parts = append(parts, fmt.Sprintf("p%d@%d", w.partition, w.offset))
	case w.partition >= 0:
		parts = append(parts, fmt.Sprintf("p%d", w.partition))
	case w.offset >= 0:
		parts = append(parts, fmt.Sprintf("@%d", w.offset))
	}
	if w.key != "" {
		parts = append(parts, w.key)
	}
	s := strings.Join(parts, " ")
	if w.detail != "" {
		s += fmt.Sprintf(": …%s…", w.detail)
	}
	return s
}

func knownReason(s string) bool {
	for _, r := range processors.Reasons {
		if string(r) == s {
			return true
		}
	}
	return false
}

func reasonNames() []string {
	out := make([]string, len(processors.Reasons))
	for i, r := range processors.Reasons {
		out[i] = string(r)
	}
	return out
}

// parseTime reads an RFC 3339 time or epoch milliseconds.
func parseTime(v *yaml.Node) (int64, error) {
	if ms, ok := candle.ParseEpochMillis([]byte(v.Value)); ok {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v.Value)
	if err != nil {
		return 0, errAt(v, "%q is not a time: write RFC 3339 (2026-01-01T00:00:00Z) or epoch milliseconds", v.Value)
	}
	return t.UnixMilli(), nil
}

// fmtTime formats Unix ms as RFC 3339 in UTC, with milliseconds only when set.
func fmtTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.999Z07:00")
}
