package main

import (
	"fmt"
	"strconv"
	"time"
)

// This file is the aggregation the two peers share: what a developer writes
// without a framework. Trades are decoded with encoding/json, prices and
// quantities parsed as float64 (cheaper than kandle's exact decimals, so the
// comparison favours the peers), and every trade updates the symbol's candle
// of each of the eight timeframes directly; a candle is emitted when a trade
// opens the next window. There is no dedupe, lateness or dead letter.

type trade struct {
	Symbol  string `json:"symbol"`
	TS      int64  `json:"ts"`
	Price   string `json:"price"`
	Qty     string `json:"qty"`
	TradeID int64  `json:"trade_id"`
}

// ohlcv is one candle as the peers emit it (JSON).
type ohlcv struct {
	Symbol    string  `json:"symbol"`
	Timeframe string  `json:"timeframe"`
	Start     int64   `json:"start"`
	Open      float64 `json:"open"`
	High      float64 `json:"high"`
	Low       float64 `json:"low"`
	Close     float64 `json:"close"`
	Volume    float64 `json:"volume"`
	Trades    int64   `json:"trades"`
}

var timeframes = [...]string{"1m", "5m", "15m", "1h", "4h", "1d", "1w", "1M"}

// sizes are the fixed window lengths (ms) of the first six timeframes.
var sizes = [...]int64{60_000, 300_000, 900_000, 3_600_000, 14_400_000, 86_400_000}

// windowStart is the start (ms) of the window of timeframe i holding ts.
func windowStart(i int, ts int64) int64 {
	switch timeframes[i] {
	case "1w": // weeks start on Monday; the epoch was a Thursday
		const week, shift = 7 * 86_400_000, 3 * 86_400_000
		return (ts+shift)/week*week - shift
	case "1M":
		t := time.UnixMilli(ts).UTC()
		return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	}
	size := sizes[i]
	return ts / size * size
}

// symbolState is a symbol's open candle of every timeframe.
type symbolState struct {
	C [len(timeframes)]ohlcv `json:"c"`
}

// update applies one trade and calls emit for every candle the trade closes.
func (s *symbolState) update(t *trade, emit func(*ohlcv)) error {
	p, err := strconv.ParseFloat(t.Price, 64)
	if err != nil {
		return fmt.Errorf("price %q: %w", t.Price, err)
	}
	q, err := strconv.ParseFloat(t.Qty, 64)
	if err != nil {
		return fmt.Errorf("qty %q: %w", t.Qty, err)
	}
	for i := range s.C {
		c := &s.C[i]
		ws := windowStart(i, t.TS)
		if c.Trades > 0 && ws > c.Start {
			emit(c)
			c.Trades = 0
		}
		if c.Trades == 0 {
			*c = ohlcv{Symbol: t.Symbol, Timeframe: timeframes[i], Start: ws, Open: p, High: p, Low: p}
		}
		if ws < c.Start {
			continue // late for this window: dropped
		}
		c.High, c.Low, c.Close = max(c.High, p), min(c.Low, p), p
		c.Volume += q
		c.Trades++
	}
	return nil
}
