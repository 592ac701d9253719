package s3parquet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/parquet-go/parquet-go"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// row is one candle as a Parquet row (see the package doc for the types):
// the columns of rowV3, then the candle's rev.
type row struct {
	rowV3
	Rev int64 `parquet:"rev"`
}

// rowV3 is the layout of files written before revisions (row's first
// sixteen columns; every candle rev 0): the columns of rowV2, then four
// more, "" when the candle has none (a source without a side, a gap
// candle's ids). Decode still reads them.
type rowV3 struct {
	rowV2
	TakerBuyBase  string `parquet:"taker_buy_base_volume"`
	TakerBuyQuote string `parquet:"taker_buy_quote_volume"`
	FirstTradeID  string `parquet:"first_trade_id"`
	LastTradeID   string `parquet:"last_trade_id"`
}

// rowV2 is the layout of files written before taker volumes and trade ids
// (row's first twelve columns); Decode still reads them.
type rowV2 struct {
	Symbol      string   `parquet:"symbol,dict"`
	Timeframe   string   `parquet:"timeframe,dict"`
	OpenTime    int64    `parquet:"open_time,timestamp(millisecond:utc)"`
	CloseTime   int64    `parquet:"close_time,timestamp(millisecond:utc)"`
	Open        [16]byte `parquet:"open,decimal(18:38)"`
	High        [16]byte `parquet:"high,decimal(18:38)"`
	Low         [16]byte `parquet:"low,decimal(18:38)"`
	Close       [16]byte `parquet:"close,decimal(18:38)"`
	Volume      string   `parquet:"volume"`       // exact decimal text: may exceed DECIMAL(38,18)
	QuoteVolume string   `parquet:"quote_volume"` // exact decimal text, up to 36 places
	Trades      int64    `parquet:"trades"`
	Gap         bool     `parquet:"gap"`
}

// rowV1 is the layout of files written before exact wide volumes (every
// decimal a DECIMAL(38,18)); Decode still reads them, so a sink merging
// into an older day's file keeps its candles.
type rowV1 struct {
	Symbol      string   `parquet:"symbol,dict"`
	Timeframe   string   `parquet:"timeframe,dict"`
	OpenTime    int64    `parquet:"open_time,timestamp(millisecond:utc)"`
	CloseTime   int64    `parquet:"close_time,timestamp(millisecond:utc)"`
	Open        [16]byte `parquet:"open,decimal(18:38)"`
	High        [16]byte `parquet:"high,decimal(18:38)"`
	Low         [16]byte `parquet:"low,decimal(18:38)"`
	Close       [16]byte `parquet:"close,decimal(18:38)"`
	Volume      [16]byte `parquet:"volume,decimal(18:38)"`
	QuoteVolume [16]byte `parquet:"quote_volume,decimal(18:38)"`
	Trades      int64    `parquet:"trades"`
	Gap         bool     `parquet:"gap"`
}

// enc128 is d's unscaled value as 16 bytes of big-endian two's complement.
func enc128(d decimal.Decimal) (b [16]byte) {
	hi, lo := d.Raw()
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	return b
}

func dec128(b [16]byte) decimal.Decimal {
	return decimal.FromRaw(binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:]))
}

func fromRow(r *row) (candle.Candle, error) {
	c, err := fromRowV3(&r.rowV3)
	if err != nil {
		return c, err
	}
	if r.Rev < 0 || r.Rev > math.MaxUint32 {
		return candle.Candle{}, fmt.Errorf("%w: rev %d", errCorrupt, r.Rev)
	}
	c.Rev = uint32(r.Rev)
	return c, nil
}

func fromRowV3(r *rowV3) (candle.Candle, error) {
	c, err := fromRowV2(&r.rowV2)
	if err != nil {
		return c, err
	}
	c.FirstTradeID, c.LastTradeID = r.FirstTradeID, r.LastTradeID
	if r.TakerBuyBase != "" || r.TakerBuyQuote != "" {
		if err := setTaker(&c, []byte(r.TakerBuyBase), []byte(r.TakerBuyQuote)); err != nil {
			return candle.Candle{}, err
		}
	}
	return c, nil
}

// setTaker sets c's taker volumes from their column texts (both present).
func setTaker(c *candle.Candle, base, quote []byte) error {
	b, err1 := decimal.ParseSum(base)
	q, err2 := decimal.ParseSum(quote)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("%w: taker_buy_base_volume %q, taker_buy_quote_volume %q: %w", errCorrupt, base, quote, err)
	}
	c.Taker, c.TakerBuyVolume, c.TakerBuyQuoteVolume = true, b, q
	return nil
}

func fromRowV2(r *rowV2) (candle.Candle, error) {
	v, err1 := decimal.ParseSum([]byte(r.Volume))
	q, err2 := decimal.ParseSum([]byte(r.QuoteVolume))
	if err := errors.Join(err1, err2); err != nil {
		return candle.Candle{}, fmt.Errorf("%w: volume %q, quote_volume %q: %w", errCorrupt, r.Volume, r.QuoteVolume, err)
	}
	return candle.Candle{
		Symbol: r.Symbol, Timeframe: r.Timeframe, OpenTime: r.OpenTime, CloseTime: r.CloseTime,
		Open: dec128(r.Open), High: dec128(r.High), Low: dec128(r.Low), Close: dec128(r.Close),
		Volume: v, QuoteVolume: q, Trades: r.Trades, Gap: r.Gap,
	}, nil
}

func fromRowV1(r *rowV1) candle.Candle {
	return candle.Candle{
		Symbol: r.Symbol, Timeframe: r.Timeframe, OpenTime: r.OpenTime, CloseTime: r.CloseTime,
		Open: dec128(r.Open), High: dec128(r.High), Low: dec128(r.Low), Close: dec128(r.Close),
		Volume: decimal.SumOf(dec128(r.Volume)), QuoteVolume: decimal.SumOf(dec128(r.QuoteVolume)),
		Trades: r.Trades, Gap: r.Gap,
	}
}

// pageBytes bounds the values of one page before compression (a day of
// 1m candles is 23 KiB per decimal column, one page). It is a constant:
// page boundaries are part of the bytes that must be deterministic.
const pageBytes = 64 << 10

// errCorrupt marks an object that exists but is not a readable candle file.
var errCorrupt = errors.New("not a readable candle parquet file")

// decodeGeneric reads a Parquet file written by this package back into
// candles with parquet-go's row reader, exactly (decimals included), in
// file order: Decode's fallback for a layout the column reader does not
// decode.
func decodeGeneric(data []byte) ([]candle.Candle, error) {
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errCorrupt, err)
	}
	if col, ok := f.Schema().Lookup("volume"); ok && col.Node.Type().Kind() == parquet.FixedLenByteArray {
		old, err := parquet.Read[rowV1](bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errCorrupt, err)
		}
		cs := make([]candle.Candle, len(old))
		for i := range old {
			cs[i] = fromRowV1(&old[i])
		}
		return cs, nil
	}
	if _, ok := f.Schema().Lookup("taker_buy_base_volume"); !ok {
		return decodeRows(data, fromRowV2)
	}
	if _, ok := f.Schema().Lookup("rev"); !ok {
		return decodeRows(data, fromRowV3)
	}
	return decodeRows(data, fromRow)
}

// decodeRows reads every row of data as an R and converts it.
func decodeRows[R any](data []byte, conv func(*R) (candle.Candle, error)) ([]candle.Candle, error) {
	rows, err := parquet.Read[R](bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errCorrupt, err)
	}
	cs := make([]candle.Candle, len(rows))
	for i := range rows {
		if cs[i], err = conv(&rows[i]); err != nil {
			return nil, err
		}
	}
	return cs, nil
}
