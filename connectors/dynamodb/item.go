package dynamodb

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// DynamoDB's hard limits.
const (
	maxItemBytes = 400 * 1024
	maxPKBytes   = 2048
	maxSKBytes   = 1024
	maxBatch     = 25
)

// Attribute names of the items this package writes (the key and TTL
// attribute names come from the TableSpec).
const (
	attrSymbol    = "symbol"
	attrTimeframe = "timeframe"
	attrOpenTime  = "open_time"
	attrCloseTime = "close_time"
	attrOpen      = "o"
	attrHigh      = "h"
	attrLow       = "l"
	attrClose     = "c"
	attrVolume    = "v"
	attrQuote     = "q"
	attrTrades    = "t"
	attrGap       = "gap"
	// The candle's revision, present only when above 0: an item without
	// it (rev 0, or written before revisions existed) reads as rev 0.
	attrRev = "rev"
	// Present only when the candle has them: taker buy base and quote
	// volume (exact strings, like v and q), first and last trade id.
	attrTakerBase  = "tbv"
	attrTakerQuote = "tbq"
	attrFirstID    = "first_trade_id"
	attrLastID     = "last_trade_id"
	attrSide       = "side"   // a ledger trade's aggressor side, "buy" or "sell", when the source maps one
	attrAction     = "action" // "cancel" or "correct" on a ledger record that takes back the trade with its id
	attrTS         = "ts"
	attrPrice      = "price"
	attrQty        = "qty"
	attrTradeID    = "trade_id"
)

// ErrItemTooLarge: the item exceeds DynamoDB's 400 KB limit (or a key its
// 2048/1024-byte limit). Rejections wrap it.
var ErrItemTooLarge = errors.New("item exceeds DynamoDB's size limits (400 KB per item, 2048 B partition key, 1024 B sort key)")

// pending is one item waiting to be written, with what it came from.
type pending struct {
	key   string // pk + "\x00" + sk, for dedupe
	item  map[string]types.AttributeValue
	c     candle.Candle
	tr    candle.Trade
	trade bool
	rev   uint32 // a candle's revision: the write is conditional on it
	cond  bool   // a candle: written by a PutItem conditional on rev
}

func strAttr(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func numAttr(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
func decAttr(d decimal.Decimal) types.AttributeValue { return strAttr(d.String()) }

// sumAttr stores a volume as a string too: a quote volume may have 36
// decimal places and more digits than a DynamoDB number holds (38).
func sumAttr(s decimal.Sum) types.AttributeValue { return strAttr(s.String()) }

// keyAttrs renders pk and sk for v and checks their lengths.
func (t *table) keyAttrs(v *vars) (pk, sk string, err error) {
	sk = t.sk.render(v)
	if t.cfg.Shards > 0 {
		v.shard = shardOf(sk, t.cfg.Shards)
	}
	pk = t.pk.render(v)
	if pk == "" || sk == "" {
		return "", "", fmt.Errorf("key renders empty (pk %q, sk %q): a placeholder had no value", pk, sk)
	}
	if len(pk) > maxPKBytes || len(sk) > maxSKBytes {
		return "", "", fmt.Errorf("%w: pk is %d bytes, sk %d bytes", ErrItemTooLarge, len(pk), len(sk))
	}
	return pk, sk, nil
}

func (t *table) skAttr(sk string) types.AttributeValue {
	if t.cfg.Table.SKType == "N" {
		return &types.AttributeValueMemberN{Value: sk}
	}
	return strAttr(sk)
}

// candleItem converts a candle into an item.
func (s *Sink) candleItem(c *candle.Candle) (pending, error) {
	v := vars{symbol: c.Symbol, timeframe: c.Timeframe, openTime: c.OpenTime, closeTime: c.CloseTime, ts: c.OpenTime}
	pk, sk, err := s.keyAttrs(&v)
	if err != nil {
		return pending{c: *c}, err
	}
	t := s.cfg.Table
	item := map[string]types.AttributeValue{
		t.PKAttribute: strAttr(pk),
		t.SKAttribute: s.skAttr(sk),
		attrSymbol:    strAttr(c.Symbol),
		attrTimeframe: strAttr(c.Timeframe),
		attrOpenTime:  numAttr(c.OpenTime),
		attrCloseTime: numAttr(c.CloseTime),
		attrOpen:      decAttr(c.Open),
		attrHigh:      decAttr(c.High),
		attrLow:       decAttr(c.Low),
		attrClose:     decAttr(c.Close),
		attrVolume:    sumAttr(c.Volume),
		attrQuote:     sumAttr(c.QuoteVolume),
		attrTrades:    numAttr(c.Trades),
		attrGap:       &types.AttributeValueMemberBOOL{Value: c.Gap},
	}
	if c.Taker {
		item[attrTakerBase], item[attrTakerQuote] = sumAttr(c.TakerBuyVolume), sumAttr(c.TakerBuyQuoteVolume)
	}
	if c.FirstTradeID != "" {
		item[attrFirstID] = strAttr(c.FirstTradeID)
	}
	if c.LastTradeID != "" {
		item[attrLastID] = strAttr(c.LastTradeID)
	}
	if c.Rev > 0 {
		item[attrRev] = numAttr(int64(c.Rev))
	}
	if ttl := s.cfg.ttlFor(c.Timeframe); ttl > 0 && t.TTLAttribute != "" {
		item[t.TTLAttribute] = numAttr(expiry(c.CloseTime, ttl))
	}
	p := pending{key: pk + "\x00" + sk, item: item, c: *c, rev: c.Rev, cond: !s.batchCandles}
	if n := itemSize(item); n > maxItemBytes {
		return p, fmt.Errorf("%w: item is %d bytes", ErrItemTooLarge, n)
	}
	return p, nil
}

// tradeItem converts a trade (or device reading) into an item.
func (s *Sink) tradeItem(tr *candle.Trade) (pending, error) {
	v := vars{symbol: tr.Key, tradeID: tr.ID, openTime: tr.TS, closeTime: tr.TS, ts: tr.TS}
	pk, sk, err := s.keyAttrs(&v)
	if err != nil {
		return pending{tr: *tr, trade: true}, err
	}
	t := s.cfg.Table
	item := map[string]types.AttributeValue{
		t.PKAttribute: strAttr(pk),
		t.SKAttribute: s.skAttr(sk),
		attrSymbol:    strAttr(tr.Key),
		attrTS:        numAttr(tr.TS),
		attrPrice:     decAttr(tr.Price),
		attrQty:       decAttr(tr.Qty),
	}
	if tr.ID != "" {
		item[attrTradeID] = strAttr(tr.ID)
	}
	switch tr.Side {
	case candle.SideBuy:
		item[attrSide] = strAttr("buy")
	case candle.SideSell:
		item[attrSide] = strAttr("sell")
	}
	switch tr.Action {
	case candle.ActionCancel: // price and qty are zero: a cancel carries none
		item[attrAction] = strAttr("cancel")
	case candle.ActionCorrect:
		item[attrAction] = strAttr("correct")
	}
	if ttl := time.Duration(s.cfg.TTL); ttl > 0 && t.TTLAttribute != "" {
		item[t.TTLAttribute] = numAttr(expiry(tr.TS, ttl))
	}
	p := pending{key: pk + "\x00" + sk, item: item, tr: *tr, trade: true}
	if n := itemSize(item); n > maxItemBytes {
		return p, fmt.Errorf("%w: item is %d bytes", ErrItemTooLarge, n)
	}
	return p, nil
}

// expiry is the TTL value (epoch seconds) for an item whose event time is
// ms. Event time, not wall time, so a redelivered item is identical.
func expiry(ms int64, ttl time.Duration) int64 {
	return (ms + ttl.Milliseconds() + 999) / 1000
}

// itemSize follows DynamoDB's item size rules closely enough to stay on the
// safe side: attribute name lengths plus value sizes (N counts one byte per
// two significant digits plus one).
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name)
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			n += len(v.Value)
		case *types.AttributeValueMemberN:
			n += (len(v.Value)+1)/2 + 1
		case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
			n++
		case *types.AttributeValueMemberB:
			n += len(v.Value)
		default:
			n += 64 // not written by this package
		}
	}
	return n
}

// itemKey returns the dedupe key of an item (from UnprocessedItems).
func (t *table) itemKey(item map[string]types.AttributeValue) string {
	return attrString(item[t.cfg.Table.PKAttribute]) + "\x00" + attrString(item[t.cfg.Table.SKAttribute])
}

func attrString(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	}
	return ""
}

// itemDecoder reads typed attributes and remembers the first problem.
type itemDecoder struct {
	item map[string]types.AttributeValue
	err  error
}

func (d *itemDecoder) fail(name, want string) {
	if d.err == nil {
		d.err = fmt.Errorf("attribute %q: missing or not %s", name, want)
	}
}

func (d *itemDecoder) str(name string) string {
	v, ok := d.item[name].(*types.AttributeValueMemberS)
	if !ok {
		d.fail(name, "a string")
		return ""
	}
	return v.Value
}

func (d *itemDecoder) optStr(name string) string {
	if v, ok := d.item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func (d *itemDecoder) num(name string) int64 {
	v, ok := d.item[name].(*types.AttributeValueMemberN)
	if !ok {
		d.fail(name, "a number")
		return 0
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		d.fail(name, "an integer")
	}
	return n
}

func (d *itemDecoder) dec(name string) decimal.Decimal {
	s := d.str(name)
	if d.err != nil {
		return decimal.Decimal{}
	}
	x, err := decimal.Parse([]byte(s))
	if err != nil {
		d.fail(name, "a decimal string")
	}
	return x
}

func (d *itemDecoder) sum(name string) decimal.Sum {
	s := d.str(name)
	if d.err != nil {
		return decimal.Sum{}
	}
	x, err := decimal.ParseSum([]byte(s))
	if err != nil {
		d.fail(name, "a decimal string")
	}
	return x
}

func (d *itemDecoder) boolean(name string) bool {
	v, ok := d.item[name].(*types.AttributeValueMemberBOOL)
	if !ok {
		d.fail(name, "a boolean")
		return false
	}
	return v.Value
}

// itemCandle converts an item written by candleItem back into a candle.
func itemCandle(item map[string]types.AttributeValue) (candle.Candle, error) {
	d := itemDecoder{item: item}
	c := candle.Candle{
		Symbol:       d.str(attrSymbol),
		Timeframe:    d.str(attrTimeframe),
		OpenTime:     d.num(attrOpenTime),
		CloseTime:    d.num(attrCloseTime),
		Open:         d.dec(attrOpen),
		High:         d.dec(attrHigh),
		Low:          d.dec(attrLow),
		Close:        d.dec(attrClose),
		Volume:       d.sum(attrVolume),
		QuoteVolume:  d.sum(attrQuote),
		Trades:       d.num(attrTrades),
		Gap:          d.boolean(attrGap),
		FirstTradeID: d.optStr(attrFirstID),
		LastTradeID:  d.optStr(attrLastID),
	}
	if _, ok := item[attrRev]; ok {
		rev := d.num(attrRev)
		if rev < 0 || rev > math.MaxUint32 {
			d.fail(attrRev, "a revision (0 to 4294967295)")
		}
		c.Rev = uint32(rev)
	}
	if _, c.Taker = item[attrTakerBase]; c.Taker {
		c.TakerBuyVolume, c.TakerBuyQuoteVolume = d.sum(attrTakerBase), d.sum(attrTakerQuote)
	}
	if d.err != nil {
		return candle.Candle{}, fmt.Errorf("decode candle item: %w", d.err)
	}
	return c, nil
}

// itemTrade converts an item written by tradeItem back into a trade.
func itemTrade(item map[string]types.AttributeValue) (candle.Trade, error) {
	d := itemDecoder{item: item}
	tr := candle.Trade{
		Key:   d.str(attrSymbol),
		TS:    d.num(attrTS),
		Price: d.dec(attrPrice),
		Qty:   d.dec(attrQty),
		ID:    d.optStr(attrTradeID),
	}
	switch side := d.optStr(attrSide); side {
	case "buy":
		tr.Side = candle.SideBuy
	case "sell":
		tr.Side = candle.SideSell
	case "":
	default:
		d.fail(attrSide, `"buy" or "sell"`)
	}
	switch action := d.optStr(attrAction); action {
	case "cancel":
		tr.Action = candle.ActionCancel
	case "correct":
		tr.Action = candle.ActionCorrect
	case "":
	default:
		d.fail(attrAction, `"cancel" or "correct"`)
	}
	if d.err != nil {
		return candle.Trade{}, fmt.Errorf("decode trade item: %w", d.err)
	}
	return tr, nil
}
