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
type RejectedError struct {
	Candles []RejectedCandle
	Trades  []RejectedTrade
}

func (e *RejectedError) Error() string {
	n := len(e.Candles) + len(e.Trades)
	var first error
	var what string
	if len(e.Candles) > 0 {
		c := e.Candles[0].Candle
		first, what = e.Candles[0].Err, fmt.Sprintf("candle %s %s %d", c.Symbol, c.Timeframe, c.OpenTime)
	} else if len(e.Trades) > 0 {
		t := e.Trades[0].Trade
		first, what = e.Trades[0].Err, fmt.Sprintf("trade %s %d %q", t.Key, t.TS, t.ID)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "dynamodb: %d item(s) rejected permanently; dead-letter them (first: %s: %v)", n, what, first)
	return b.String()
}

func (e *RejectedError) add(p pending, err error) {
	if p.trade {
		e.Trades = append(e.Trades, RejectedTrade{Trade: p.tr, Err: err})
	} else {
		e.Candles = append(e.Candles, RejectedCandle{Candle: p.c, Err: err})
	}
}

func (e *RejectedError) merge(o *RejectedError) {
	if o != nil {
		e.Candles = append(e.Candles, o.Candles...)
		e.Trades = append(e.Trades, o.Trades...)
	}
}

// orNil returns e as an error, or nil when it lists nothing.
func (e *RejectedError) orNil() error {
	if e == nil || len(e.Candles)+len(e.Trades) == 0 {
		return nil
	}
	return e
}
