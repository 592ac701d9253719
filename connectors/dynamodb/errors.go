package dynamodb

import (
	"fmt"
	"strings"

	"github.com/kandle/kandle/candle"
)

// RejectedCandle is a candle DynamoDB will never accept, and why.
type RejectedCandle struct {
	Candle candle.Candle
	Err    error
}

// RejectedTrade is a trade (or reading) DynamoDB will never accept, and why.
type RejectedTrade struct {
	Trade candle.Trade
	Err   error
}

// RejectedError lists items that failed permanently (too large, or refused
// by DynamoDB's validation). Everything else in the same call was written
// or is still buffered. The engine dead-letters these and carries on:
// retrying them would fail the same way.
//
// It satisfies the engine's RejectedCandles interface (error + Candles()).
type RejectedError struct {
	CandleErrs []RejectedCandle
	TradeErrs  []RejectedTrade
}

// Candles returns the rejected candles.
func (e *RejectedError) Candles() []candle.Candle {
	out := make([]candle.Candle, len(e.CandleErrs))
	for i := range e.CandleErrs {
		out[i] = e.CandleErrs[i].Candle
	}
	return out
}

// Trades returns the rejected trades (WriteTrades).
func (e *RejectedError) Trades() []candle.Trade {
	out := make([]candle.Trade, len(e.TradeErrs))
	for i := range e.TradeErrs {
		out[i] = e.TradeErrs[i].Trade
	}
	return out
}

func (e *RejectedError) Error() string {
	n := len(e.CandleErrs) + len(e.TradeErrs)
	var first error
	var what string
	if len(e.CandleErrs) > 0 {
		c := e.CandleErrs[0].Candle
		first, what = e.CandleErrs[0].Err, fmt.Sprintf("candle %s %s %d", c.Symbol, c.Timeframe, c.OpenTime)
	} else if len(e.TradeErrs) > 0 {
		t := e.TradeErrs[0].Trade
		first, what = e.TradeErrs[0].Err, fmt.Sprintf("trade %s %d %q", t.Key, t.TS, t.ID)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "dynamodb: %d item(s) rejected permanently; dead-letter them (first: %s: %v)", n, what, first)
	return b.String()
}

func (e *RejectedError) add(p pending, err error) {
	if p.trade {
		e.TradeErrs = append(e.TradeErrs, RejectedTrade{Trade: p.tr, Err: err})
	} else {
		e.CandleErrs = append(e.CandleErrs, RejectedCandle{Candle: p.c, Err: err})
	}
}

func (e *RejectedError) merge(o *RejectedError) {
	if o != nil {
		e.CandleErrs = append(e.CandleErrs, o.CandleErrs...)
		e.TradeErrs = append(e.TradeErrs, o.TradeErrs...)
	}
}

// orNil returns e as an error, or nil when it lists nothing.
func (e *RejectedError) orNil() error {
	if e == nil || len(e.CandleErrs)+len(e.TradeErrs) == 0 {
		return nil
	}
	return e
}
