package valkey

import (
	"strconv"

	"github.com/kandle/kandle/candle"
	"github.com/valkey-io/valkey-go"
)

// names builds keys and channels with the configured prefix.
type names struct{ prefix string }

func (n names) hash(tf, sym string) string    { return n.prefix + "candle:active:" + tf + ":" + sym }
func (n names) channel(tf, sym string) string { return n.prefix + "pub:candle:" + tf + ":" + sym }
func (n names) symbols() string               { return n.prefix + "active:symbols" }

// revision is the key of a window's revision guard: the newest rev above 0
// stored for the window (a string), kept revGuardTTL (or the hash's expiry,
// when longer) after it was set.
func (n names) revision(c *candle.Candle) string {
	return n.prefix + "candle:rev:" + c.Timeframe + ":" + c.Symbol + ":" + strconv.FormatInt(c.OpenTime, 10)
}

// key identifies one live candle.
type key struct{ tf, sym string }

func keyOf(c *candle.Candle) key { return key{c.Timeframe, c.Symbol} }

// window identifies one window of one live candle: the unit of coalescing.
// A late trade may update an older window that is still open while a newer
// one is pending; both updates are real and both are sent.
type window struct {
	key
	open int64
}

func windowOf(c *candle.Candle) window { return window{keyOf(c), c.OpenTime} }

// message is the published JSON: the candle's wire form plus "final".
func message(buf []byte, c *candle.Candle, final bool) []byte {
	buf = c.AppendJSON(buf[:0])
	buf = buf[:len(buf)-1] // drop '}'
	if final {
		return append(buf, `,"final":true}`...)
	}
	return append(buf, `,"final":false}`...)
}

// hset builds HSET of the hash fields o h l c v q t open_time close_time
// tb tq fid lid (see tradeFields) rev.
func hset(b valkey.Builder, k string, c *candle.Candle) valkey.Completed {
	tb, tq, fid, lid := tradeFields(c)
	return b.Hset().Key(k).FieldValue().
		FieldValue("o", c.Open.String()).
		FieldValue("h", c.High.String()).
		FieldValue("l", c.Low.String()).
		FieldValue("c", c.Close.String()).
		FieldValue("v", c.Volume.String()).
		FieldValue("q", c.QuoteVolume.String()).
		FieldValue("t", strconv.FormatInt(c.Trades, 10)).
		FieldValue("open_time", strconv.FormatInt(c.OpenTime, 10)).
		FieldValue("close_time", strconv.FormatInt(c.CloseTime, 10)).
		FieldValue("tb", tb).FieldValue("tq", tq).FieldValue("fid", fid).FieldValue("lid", lid).
		FieldValue("rev", strconv.FormatUint(uint64(c.Rev), 10)).
		Build()
}

// tradeFields are the hash fields tb and tq (taker buy base and quote
// volume, exact text) and fid and lid (first and last trade id). Each is
// "" when the candle has none: every write sets all four, so a hash never
// keeps a value of an earlier window.
func tradeFields(c *candle.Candle) (tb, tq, fid, lid string) {
	if c.Taker {
		tb, tq = c.TakerBuyVolume.String(), c.TakerBuyQuoteVolume.String()
	}
	return tb, tq, c.FirstTradeID, c.LastTradeID
}

// ttl returns the hash expiry in ms: the fixed one, or twice the window.
func ttl(fixed int64, c *candle.Candle) int64 {
	if fixed > 0 {
		return fixed
	}
	if d := c.CloseTime - c.OpenTime; d > 0 {
		return 2 * d
	}
	return 1
}

// invalid says why c cannot be stored, or "".
func invalid(c *candle.Candle) string {
	switch {
	case c.Symbol == "":
		return "empty symbol"
	case c.Timeframe == "":
		return "empty timeframe"
	case c.CloseTime <= c.OpenTime:
		return "close_time is not after open_time"
	}
	return ""
}
