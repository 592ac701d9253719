package candle

import (
	"encoding/json"
	"errors"
	"github.com/kandle/kandle/decimal"
	"strconv"
	"time"
)

// AppendJSON appends c as one JSON object (the wire format of output topics),
// decimals as strings, without reflection.
func (c *Candle) AppendJSON(b []byte) []byte {
	b = append(b, `{"symbol":`...)
	b = strconv.AppendQuote(b, c.Symbol)
	b = append(b, `,"timeframe":"`...)
	b = append(b, c.Timeframe...)
	b = append(b, `","open_time":`...)
	b = strconv.AppendInt(b, c.OpenTime, 10)
	b = append(b, `,"close_time":`...)
	b = strconv.AppendInt(b, c.CloseTime, 10)
	b = appendDec(b, `,"open":"`, c.Open)
	b = appendDec(b, `","high":"`, c.High)
	b = appendDec(b, `","low":"`, c.Low)
	b = appendDec(b, `","close":"`, c.Close)
	b = appendDec(b, `","volume":"`, c.Volume)
	b = appendDec(b, `","quote_volume":"`, c.QuoteVolume)
	b = append(b, `","trades":`...)
	b = strconv.AppendInt(b, c.Trades, 10)
	b = append(b, `,"gap":`...)
	b = strconv.AppendBool(b, c.Gap)
	return append(b, '}')
}

func appendDec(b []byte, prefix string, d decimal.Decimal) []byte {
	return d.Append(append(b, prefix...))
}

// ParseJSON decodes a candle written by AppendJSON (or any equivalent JSON).
func ParseJSON(b []byte) (Candle, error) {
	var c Candle
	if err := json.Unmarshal(b, &c); err != nil {
		return Candle{}, err
	}
	if c.Symbol == "" || c.Timeframe == "" || c.CloseTime <= c.OpenTime {
		return Candle{}, errors.New("candle: missing symbol, timeframe or window")
	}
	return c, nil
}

// ErrTime is returned by ParseEventTime for a value that is neither.
var ErrTime = errors.New("event time must be epoch milliseconds or an RFC 3339 string")

// ParseEventTime reads an event time given as epoch milliseconds (a JSON
// number or a string of digits) or an RFC 3339 timestamp, into Unix ms.
func ParseEventTime(raw []byte, quoted bool) (int64, error) {
	if ms, ok := ParseEpochMillis(raw); ok {
		return ms, nil
	}
	if !quoted {
		return 0, ErrTime
	}
	t, err := time.Parse(time.RFC3339Nano, string(raw))
	if err != nil {
		return 0, ErrTime
	}
	return t.UnixMilli(), nil
}

// ParseEpochMillis reads a non-negative whole number of milliseconds.
func ParseEpochMillis(raw []byte) (int64, bool) {
	if len(raw) == 0 || len(raw) > 16 {
		return 0, false
	}
	var ms int64
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, false
		}
		ms = ms*10 + int64(c-'0')
	}
	return ms, true
}
