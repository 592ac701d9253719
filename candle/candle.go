// Package candle holds kandle's data model: trades in, OHLCV candles out, and
// the timeframes that cut event time into windows.
//
// Every type here is plain data. The rules that turn trades into candles live
// in package processors; this package only says what a window is and how a
// candle looks on the wire (JSON with decimals as strings).
package candle

import (
	"github.com/kandle/kandle/decimal"
)

// Trade is one validated input record: a trade, or a device reading where
// Price is the reading and Qty its weight (1 when the source has none).
type Trade struct {
	Key   string // symbol or device id
	TS    int64  // event time, Unix milliseconds
	Price decimal.Decimal
	Qty   decimal.Decimal
	ID    string // trade id without JSON quotes; "" when the record has none
}

// Candle is one OHLCV window of one key. OpenTime is inclusive, CloseTime
// exclusive (Unix ms). A gap candle had no trades: OHLC repeat the previous
// close and the volumes are zero.
type Candle struct {
	Symbol      string          `json:"symbol"`
	Timeframe   string          `json:"timeframe"`
	OpenTime    int64           `json:"open_time"`
	CloseTime   int64           `json:"close_time"`
	Open        decimal.Decimal `json:"open"`
	High        decimal.Decimal `json:"high"`
	Low         decimal.Decimal `json:"low"`
	Close       decimal.Decimal `json:"close"`
	Volume      decimal.Sum     `json:"volume"`       // Σ qty, exact
	QuoteVolume decimal.Sum     `json:"quote_volume"` // Σ price × qty, exact (up to 36 places)
	Trades      int64           `json:"trades"`
	Gap         bool            `json:"gap"`
}

// Equal reports whether a and b are the same candle, comparing decimals as
// numbers (a wide volume is not comparable with ==).
func (a *Candle) Equal(b *Candle) bool {
	return a.Symbol == b.Symbol && a.Timeframe == b.Timeframe && a.OpenTime == b.OpenTime &&
		a.CloseTime == b.CloseTime && a.Open == b.Open && a.High == b.High && a.Low == b.Low &&
		a.Close == b.Close && a.Volume.Equal(b.Volume) && a.QuoteVolume.Equal(b.QuoteVolume) &&
		a.Trades == b.Trades && a.Gap == b.Gap
}
