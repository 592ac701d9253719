package candle

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/kandle/kandle/decimal"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends c as one JSON object (the wire format of output topics),
// decimals as strings, without reflection.
func (c *Candle) AppendJSON(b []byte) []byte {
	// One allocation for the whole object: the member names and punctuation
	// take 171 bytes, two epoch-ms times 26, and a decimal of up to 20 digits
	// in all (most prices and volumes) fits in 21 bytes. Larger ones grow it.
	// The optional taker volumes take 55 bytes of names and two decimals,
	// the trade ids 38 bytes of names and their text.
	n := 171 + 26 + 6*21 + len(c.Symbol) + 2 + len(c.Timeframe) + 17 // 17: a rev
	if c.Taker {
		n += 55 + 2*21
	}
	if c.FirstTradeID != "" || c.LastTradeID != "" {
		n += 38 + len(c.FirstTradeID) + len(c.LastTradeID)
	}
	b = slices.Grow(b, n)
	b = append(b, `{"symbol":`...)
	b = AppendJSONString(b, c.Symbol)
	b = append(b, `,"timeframe":`...)
	b = AppendJSONString(b, c.Timeframe)
	b = append(b, `,"open_time":`...)
	b = strconv.AppendInt(b, c.OpenTime, 10)
	b = append(b, `,"close_time":`...)
	b = strconv.AppendInt(b, c.CloseTime, 10)
	b = appendDec(b, `,"open":"`, c.Open)
	b = appendDec(b, `","high":"`, c.High)
	b = appendDec(b, `","low":"`, c.Low)
	b = appendDec(b, `","close":"`, c.Close)
	b = c.Volume.Append(append(b, `","volume":"`...))
	b = c.QuoteVolume.Append(append(b, `","quote_volume":"`...))
	if c.Taker {
		b = c.TakerBuyVolume.Append(append(b, `","taker_buy_base_volume":"`...))
		b = c.TakerBuyQuoteVolume.Append(append(b, `","taker_buy_quote_volume":"`...))
	}
	b = append(b, `","trades":`...)
	b = strconv.AppendInt(b, c.Trades, 10)
	if c.FirstTradeID != "" {
		b = AppendJSONString(append(b, `,"first_trade_id":`...), c.FirstTradeID)
	}
	if c.LastTradeID != "" {
		b = AppendJSONString(append(b, `,"last_trade_id":`...), c.LastTradeID)
	}
	b = append(b, `,"gap":`...)
	b = strconv.AppendBool(b, c.Gap)
	if c.Rev > 0 {
		b = strconv.AppendUint(append(b, `,"rev":`...), uint64(c.Rev), 10)
	}
	return append(b, '}')
}

func appendDec(b []byte, prefix string, d decimal.Decimal) []byte {
	return d.Append(append(b, prefix...))
}

// ParseJSON decodes a candle written by AppendJSON (or any equivalent JSON).
// Output topics are read by every rollup stage, so the common shape is
// scanned by hand; anything unusual (escapes, unknown keys, other spacing)
// falls back to encoding/json.
func ParseJSON(b []byte) (Candle, error) {
	var c Candle
	sym, tf, err := ParseJSONRaw(b, &c)
	if err != nil {
		return Candle{}, err
	}
	c.Symbol, c.Timeframe = string(sym), string(tf)
	return c, nil
}

// ParseJSONRaw is ParseJSON without building the two strings: it fills c
// except Symbol and Timeframe (left empty) and returns those as bytes,
// which on the common shape point into b (nothing is allocated). A caller
// that looks keys up by them (a rollup stage, once per sub-candle) builds a
// string only for a key it has not seen. It accepts and rejects exactly
// what ParseJSON does.
func ParseJSONRaw(b []byte, c *Candle) (symbol, timeframe []byte, err error) {
	symbol, timeframe, ok := parseFast(b, c)
	if !ok {
		if symbol, timeframe, err = parseGeneral(b, c); err != nil {
			return nil, nil, err
		}
	}
	if err := checkParsed(symbol, timeframe, c); err != nil {
		return nil, nil, err
	}
	return symbol, timeframe, nil
}

// parseGeneral reads any JSON form of a candle with encoding/json (the
// fallback of parseFast).
func parseGeneral(b []byte, c *Candle) (symbol, timeframe []byte, err error) {
	type plain Candle
	var slow struct { // only the fallback pays for its escape to the heap
		plain
		// Shadow the embedded fields: present or absent matters.
		TakerBuyVolume      *decimal.Sum `json:"taker_buy_base_volume"`
		TakerBuyQuoteVolume *decimal.Sum `json:"taker_buy_quote_volume"`
	}
	if err := json.Unmarshal(b, &slow); err != nil {
		*c = Candle{}
		return nil, nil, err
	}
	if (slow.TakerBuyVolume == nil) != (slow.TakerBuyQuoteVolume == nil) {
		*c = Candle{}
		return nil, nil, errTakerPair
	}
	symbol, timeframe = []byte(slow.Symbol), []byte(slow.Timeframe)
	slow.Symbol, slow.Timeframe = "", ""
	*c = Candle(slow.plain)
	if slow.TakerBuyVolume != nil {
		c.Taker, c.TakerBuyVolume, c.TakerBuyQuoteVolume = true, *slow.TakerBuyVolume, *slow.TakerBuyQuoteVolume
	}
	return symbol, timeframe, nil
}

var errTakerPair = errors.New("candle: taker_buy_base_volume and taker_buy_quote_volume come together or not at all")

// checkParsed is what every decoded candle must satisfy; it clears c when
// it does not.
func checkParsed(symbol, timeframe []byte, c *Candle) error {
	if len(symbol) == 0 || len(timeframe) == 0 || c.CloseTime <= c.OpenTime {
		*c = Candle{}
		return errors.New("candle: missing symbol, timeframe or window")
	}
	for _, s := range [...][]byte{symbol, timeframe} {
		if p := KeyProblem(s); p != "" {
			*c = Candle{}
			return fmt.Errorf("candle: %q %s: kandle writes only printable UTF-8 names", s, p)
		}
	}
	return nil
}

// parseFast reads a flat JSON object of the candle fields without escapes
// into c (but for Symbol and Timeframe, returned as slices of b). ok is
// false for any other shape; c is then partly written.
func parseFast(b []byte, c *Candle) (symbol, timeframe []byte, ok bool) {
	*c = Candle{}
	var taker uint8 // bit 1: taker_buy_base_volume seen, bit 2: taker_buy_quote_volume
	i := 0
	if len(b) < 2 || b[0] != '{' {
		return nil, nil, false
	}
	i++
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, nil, false
		}
		j := i + 1
		for j < len(b) && b[j] != '"' {
			j++
		}
		if j+1 >= len(b) || b[j+1] != ':' {
			return nil, nil, false
		}
		key := b[i+1 : j]
		i = j + 2
		if i >= len(b) {
			return nil, nil, false
		}
		var val []byte
		quoted := b[i] == '"'
		if quoted {
			j = i + 1
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					return nil, nil, false
				}
				j++
			}
			if j >= len(b) {
				return nil, nil, false
			}
			val, i = b[i+1:j], j+1
		} else {
			j = i
			for j < len(b) && b[j] != ',' && b[j] != '}' {
				j++
			}
			val, i = b[i:j], j
		}
		var err error
		ok := true // false: a shape the fast path does not take
		switch string(key) {
		case "symbol":
			symbol = val
			ok = quoted
		case "timeframe":
			timeframe = val
			ok = quoted
		case "open_time":
			c.OpenTime, err = strconv.ParseInt(string(val), 10, 64)
		case "close_time":
			c.CloseTime, err = strconv.ParseInt(string(val), 10, 64)
		case "open":
			c.Open, err = decimal.Parse(val)
		case "high":
			c.High, err = decimal.Parse(val)
		case "low":
			c.Low, err = decimal.Parse(val)
		case "close":
			c.Close, err = decimal.Parse(val)
		case "volume":
			c.Volume, err = decimal.ParseSum(val)
		case "quote_volume":
			c.QuoteVolume, err = decimal.ParseSum(val)
		case "trades":
			c.Trades, err = strconv.ParseInt(string(val), 10, 64)
		case "taker_buy_base_volume":
			c.TakerBuyVolume, err = decimal.ParseSum(val)
			taker |= 1
			ok = quoted
		case "taker_buy_quote_volume":
			c.TakerBuyQuoteVolume, err = decimal.ParseSum(val)
			taker |= 2
			ok = quoted
		case "first_trade_id":
			c.FirstTradeID = string(val)
			ok = quoted && utf8.Valid(val) // else encoding/json's replacement rules apply
		case "last_trade_id":
			c.LastTradeID = string(val)
			ok = quoted && utf8.Valid(val)
		case "gap":
			switch string(val) {
			case "true":
				c.Gap = true
			case "false":
				c.Gap = false
			default:
				return nil, nil, false
			}
		case "rev":
			var r uint64
			r, err = strconv.ParseUint(string(val), 10, 32)
			c.Rev = uint32(r)
			ok = !quoted
		case "final":
		default:
			return nil, nil, false
		}
		if err != nil || !ok || (quoted && (string(key) == "open_time" || string(key) == "close_time" || string(key) == "trades")) {
			return nil, nil, false
		}
		if i >= len(b) {
			return nil, nil, false
		}
		switch b[i] {
		case ',':
			i++
		case '}':
			if taker != 0 && taker != 3 {
				return nil, nil, false // the general path says why
			}
			c.Taker = taker == 3
			return symbol, timeframe, i == len(b)-1
		default:
			return nil, nil, false
		}
	}
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
	if n := len(raw); n > 8 {
		// Today's epoch ms have 13 digits: two eight-digit steps. The last
		// eight digits in one; the first n-8, padded with leading '0's to
		// eight, in the other.
		const ones = 0x0101010101010101
		pad := 8 * uint(16-n) // bits of padding: 8 × (8 - (n-8))
		hiw := binary.LittleEndian.Uint64(raw)<<(pad&63) | ones*'0'&(1<<(pad&63)-1)
		hi, ok1 := eightDigits(hiw)
		lo, ok2 := eightDigits(binary.LittleEndian.Uint64(raw[n-8:]))
		if !ok1 || !ok2 {
			return 0, false
		}
		return int64(hi*1e8 + lo), true
	}
	var ms int64
	if len(raw) == 8 {
		v, ok := eightDigits(binary.LittleEndian.Uint64(raw))
		return int64(v), ok
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, false
		}
		ms = ms*10 + int64(c-'0')
	}
	return ms, true
}

// eightDigits parses eight ASCII digits loaded little-endian (first digit in
// the low byte); ok is false when any byte is not a digit.
func eightDigits(x uint64) (uint64, bool) {
	const ones = 0x0101010101010101
	d := x - ones*'0' // each byte 0..9 when it was a digit
	// A byte below '0' borrows (high bit set); one above '9' reaches ≥ 0x80 after +0x76.
	if (d|(d+ones*0x76))&(ones*0x80) != 0 || x&(ones*0x80) != 0 {
		return 0, false
	}
	d = (d*10 + d>>8) & 0x00FF00FF00FF00FF      // pairs
	d = (d*100 + d>>16) & 0x0000FFFF0000FFFF    // quads
	return (d*10000 + d>>32) & 0xFFFFFFFF, true // all eight
}
