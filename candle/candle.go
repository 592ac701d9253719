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
	// Side is the aggressor (taker) side: SideBuy, SideSell, or SideNone
	// when the source maps no side field.
	Side Side
	// Action says whether the record is a trade (ActionTrade, also when
	// the source maps no action field) or takes back the earlier trade
	// with the same ID: ActionCancel removes it, ActionCorrect replaces its
	// price and quantity with this record's.
	Action Action
}

// Action is what a record does to the trade its ID names.
type Action uint8

const (
	ActionTrade   Action = iota // a new trade
	ActionCancel                // the trade with this ID never happened
	ActionCorrect               // the trade with this ID had this record's price and quantity
)

// Side is which side of a trade took liquidity (the taker, or aggressor).
type Side uint8

const (
	SideNone Side = iota // the source has no side mapping
	SideBuy              // the taker bought (the buyer was not the maker)
	SideSell             // the taker sold (the buyer was the maker)
)

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
	// Taker says the series has an aggressor side (its source maps a side
	// field): then TakerBuyVolume and TakerBuyQuoteVolume are the exact Σ qty
	// and Σ price × qty of the trades whose taker bought (zero for a gap
	// candle), and the JSON carries them; without it they are absent.
	// encoding/json does not know this rule (it always writes both and
	// never sets Taker): read and write candles with AppendJSON and
	// ParseJSON.
	Taker               bool        `json:"-"`
	TakerBuyVolume      decimal.Sum `json:"taker_buy_base_volume"`
	TakerBuyQuoteVolume decimal.Sum `json:"taker_buy_quote_volume"`
	// FirstTradeID and LastTradeID are the ids of the window's open and
	// close trades (the earliest and latest by event time, ties by arrival
	// like open and close); "" (absent from the JSON) when that trade
	// carried no id, the source maps none, or the candle is a gap.
	FirstTradeID string `json:"first_trade_id,omitempty"`
	LastTradeID  string `json:"last_trade_id,omitempty"`
	// Rev is the candle's revision: 0 for the first final, then one more
	// each time a late trade, a cancel or a correction inside the
	// processor's revision horizon changes the closed window (and for the
	// rollups and gap candles that change with it). Consumers keep the
	// highest rev of a window. Absent from the JSON when 0.
	Rev uint32 `json:"rev,omitempty"`
}

// Equal reports whether a and b are the same candle, comparing decimals as
// numbers (a wide volume is not comparable with ==).
func (a *Candle) Equal(b *Candle) bool {
	return a.Symbol == b.Symbol && a.Timeframe == b.Timeframe && a.OpenTime == b.OpenTime &&
		a.CloseTime == b.CloseTime && a.Open == b.Open && a.High == b.High && a.Low == b.Low &&
		a.Close == b.Close && a.Volume.Equal(b.Volume) && a.QuoteVolume.Equal(b.QuoteVolume) &&
		a.Trades == b.Trades && a.Gap == b.Gap && a.Taker == b.Taker &&
		a.TakerBuyVolume.Equal(b.TakerBuyVolume) && a.TakerBuyQuoteVolume.Equal(b.TakerBuyQuoteVolume) &&
		a.FirstTradeID == b.FirstTradeID && a.LastTradeID == b.LastTradeID && a.Rev == b.Rev
}
