package candle

import "github.com/kandle/kandle/decimal"

// Combining closed candles into a longer window is one rule, used by the
// rollup processor as sub-candles arrive and by the serve API for a
// timeframe built at query time:
//
//   - open, high and low come from the sub-candles that had trades (a gap
//     sub-candle has none); close is the last sub-candle's close;
//   - volume, quote volume, trades and the taker buy volumes are the exact
//     sums of all of them; the taker volumes are present only when every
//     sub-candle has them (a part would read as the whole: sub-candles from
//     before a source mapped its side have none);
//   - the first trade id is the first non-gap sub-candle's, the last trade
//     id the last non-gap sub-candle's (the window's earliest and latest
//     trades, as direct aggregation finds them);
//   - a window whose sub-candles are all gaps is a gap candle, flat at its
//     close (FlattenGap).

// NewWindow is the longer candle before its first sub-candle, for Merge.
func NewWindow(symbol, timeframe string, open, close int64) Candle {
	return Candle{Symbol: symbol, Timeframe: timeframe, OpenTime: open, CloseTime: close, Taker: true}
}

// Merge adds sub, the next closed sub-candle in time, to the longer candle
// acc (started by NewWindow). nonGap says whether acc already holds a
// sub-candle with trades; the result says whether it does now.
func Merge(acc, sub *Candle, nonGap bool) bool {
	v, q := acc.Volume.Add(sub.Volume), acc.QuoteVolume.Add(sub.QuoteVolume) // exact: widen, never fail
	if !sub.Gap {
		acc.LastTradeID = sub.LastTradeID
		if !nonGap {
			acc.Open, acc.High, acc.Low = sub.Open, sub.High, sub.Low
			acc.FirstTradeID = sub.FirstTradeID
			nonGap = true
		} else {
			if sub.High.Cmp(acc.High) > 0 {
				acc.High = sub.High
			}
			if sub.Low.Cmp(acc.Low) < 0 {
				acc.Low = sub.Low
			}
		}
	}
	acc.Close, acc.Volume, acc.QuoteVolume = sub.Close, v, q
	acc.Trades += sub.Trades
	if acc.Taker = acc.Taker && sub.Taker; acc.Taker {
		acc.TakerBuyVolume = acc.TakerBuyVolume.Add(sub.TakerBuyVolume)
		acc.TakerBuyQuoteVolume = acc.TakerBuyQuoteVolume.Add(sub.TakerBuyQuoteVolume)
	} else {
		acc.TakerBuyVolume, acc.TakerBuyQuoteVolume = decimal.Sum{}, decimal.Sum{}
	}
	return nonGap
}

// FlattenGap makes c a gap candle at its close when none of its
// sub-candles had trades (nonGap false).
func FlattenGap(c *Candle, nonGap bool) {
	if !nonGap {
		c.Open, c.High, c.Low, c.Gap = c.Close, c.Close, c.Close, true
	}
}
