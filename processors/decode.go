package processors

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// Fields names the JSON members a trade is read from. A dotted path such as
// "data.p" reaches into nested objects. Qty "" means every trade has qty 1;
// ID "" means records carry no trade id (nothing is ever a duplicate).
//
// The aggressor (taker) side comes from at most one of two fields; with
// neither, trades have no side (candle.SideNone) and candles no taker
// volumes:
//   - Side holds "buy" (the taker bought) or "sell" (the taker sold), in
//     any ASCII letter case ("BUY", "Sell") and nothing else: no spaces, no
//     abbreviations;
//   - BuyerMaker holds the JSON boolean "the buyer was the maker": true
//     means the taker sold, false that the taker bought (strings "true" or
//     numbers are not booleans).
//
// A record without the mapped field is rejected missing_field; one whose
// value is not one of these is rejected invalid_side.
//
// Action, when set, names the field saying what a record does to the trade
// its ID names (see ActionValues for the accepted values). A record without
// the field, or with null, is a new trade, so a feed whose cancels carry an
// action field and whose trades do not needs no rewriting. Any other value
// is rejected invalid_action. A cancel or correction names the trade it
// takes back by the trade's id (ID set, a non-empty string or number; else
// missing_field): the aggregator looks for it in the window of the
// record's own time first, then in the key's other windows inside the
// revision horizon, so the time may be the trade's or the cancel's. A
// cancel needs only the key, the time and the id: its price, qty and side
// are neither required nor read, and the Trade carries zero for them. A
// correction is read like a trade: its price and qty (and side, when
// mapped) are the corrected trade's and are required and checked as for a
// trade.
type Fields struct{ Key, Time, Price, Qty, ID, Side, BuyerMaker, Action string }

// ActionValues documents the values of an action field (Fields.Action):
// each is accepted in any ASCII letter case and nothing else (no spaces, no
// abbreviations, a JSON string only).
const ActionValues = `"trade" or "new" (a new trade, as when the field is absent or null), "cancel", "break" or "bust" (the trade never happened), "correct" or "correction" (the trade had this record's price and qty)`

// DecoderConfig configures a Decoder.
type DecoderConfig struct {
	Fields         Fields
	Symbols        []string // whitelist of keys; empty accepts every key
	MaxRecordBytes int      // 0 = unlimited
	// KeyCheck rejects (reason key_mismatch) an otherwise valid record whose
	// Record.Key is not its key field's value, so a key never spreads over
	// two partitions (whose windows would each emit a final candle). A
	// record without a key fails the check. Aggregator applies it; Decode
	// has no record key and does not.
	KeyCheck bool
}

const (
	fKey = iota
	fTime
	fPrice
	fQty
	fID
	fSide
	fMaker
	fAction
	numFields
)

// maxInterned bounds the key intern table when no whitelist is set, so a
// stream of garbage keys cannot grow it without limit.
const maxInterned = 1 << 20

// Decoder turns one JSON record into a candle.Trade. It is not safe for
// concurrent use: each Aggregator owns one (see Aggregator).
type Decoder struct {
	cfg       DecoderConfig
	root      *pathLevel
	whitelist bool
	keys      table[struct{}]   // interned keys (the whitelist when set)
	rej       Rejection         // why the last scan or intern failed
	names     [numFields]string // field paths, for details
	caps      [numFields]span
	shape     shape    // layout of the last flat object accepted (see shape.go)
	rec       shapeRec // scratch for learning it
	noShape   bool     // tests: always use the general scanner
	keyBuf    []byte
	idBuf     []byte
	tsBuf     []byte
	one       decimal.Decimal
}

// NewDecoder compiles cfg. It fails when a required field name is missing
// or two fields share a path.
func NewDecoder(cfg DecoderConfig) (*Decoder, error) {
	f := cfg.Fields
	for _, req := range []struct{ what, path string }{{"key", f.Key}, {"time", f.Time}, {"price", f.Price}} {
		if req.path == "" {
			return nil, fmt.Errorf("decoder: the %s field name is empty: set fields.%s in the topology", req.what, req.what)
		}
	}
	if f.Side != "" && f.BuyerMaker != "" {
		return nil, fmt.Errorf("decoder: fields.side (%q) and fields.buyer_maker (%q) are both set: map the aggressor side from one of them", f.Side, f.BuyerMaker)
	}
	if f.Action != "" && f.ID == "" {
		return nil, fmt.Errorf("decoder: fields.action (%q) is set without fields.id: a cancel or correction names its trade by id", f.Action)
	}
	d := &Decoder{cfg: cfg, keys: newTable[struct{}](), one: decimal.FromInt(1), root: &pathLevel{}}
	d.names = [numFields]string{f.Key, f.Time, f.Price, f.Qty, f.ID, f.Side, f.BuyerMaker, f.Action}
	for i, path := range d.names {
		if path == "" {
			continue
		}
		if err := d.addPath(path, i); err != nil {
			return nil, err
		}
	}
	d.root.index()
	if len(cfg.Symbols) > 0 {
		d.whitelist = true
		for _, s := range cfg.Symbols {
			d.keys.put(s, struct{}{})
		}
	}
	if cfg.MaxRecordBytes < 0 {
		return nil, fmt.Errorf("decoder: max record bytes %d is negative: use 0 for unlimited", cfg.MaxRecordBytes)
	}
	return d, nil
}

func (d *Decoder) addPath(path string, field int) error {
	parts := strings.Split(path, ".")
	lvl := d.root
	for i, p := range parts {
		if p == "" {
			return fmt.Errorf("decoder: field path %q has an empty segment", path)
		}
		j := -1
		for k := range lvl.nodes {
			if lvl.nodes[k].name == p {
				j = k
			}
		}
		if j < 0 {
			lvl.nodes = append(lvl.nodes, pathNode{name: p, field: -1})
			j = len(lvl.nodes) - 1
		}
		n := &lvl.nodes[j]
		if i == len(parts)-1 {
			if n.field >= 0 || n.children != nil {
				return fmt.Errorf("decoder: field path %q is used twice or inside another field", path)
			}
			n.field = field
			break
		}
		if n.field >= 0 {
			return fmt.Errorf("decoder: field path %q is inside another field", path)
		}
		if n.children == nil {
			n.children = &pathLevel{}
		}
		lvl = n.children
	}
	return nil
}

// Decode fills t from one JSON record. When ok is false, rej says why
// (Reason, Detail, and Key when the key was readable); the caller fills in
// Partition, Offset and Value.
//
// t.Key is interned (a stable string). To stay allocation-free, t.ID
// aliases value's bytes (except for ids with JSON escapes, which are copied):
// it is valid as long as value is not modified or reused. Use
// strings.Clone(t.ID) to keep it beyond that.
func (d *Decoder) Decode(value []byte, t *candle.Trade) (rej Rejection, ok bool) {
	var quote decimal.Sum
	kb, ok := d.scan(value, t, &quote)
	if ok {
		t.Key, ok = d.intern(kb)
	}
	if !ok {
		return d.rej, false
	}
	return Rejection{}, true
}

// scan is Decode without the key lookup: it validates the record, fills
// every field of t but Key, sets quote to the exact price × qty and returns the key's bytes (which may alias d's scratch).
// The caller resolves them with intern, or with its own table of keys that
// intern admitted before.
func (d *Decoder) scan(value []byte, t *candle.Trade, quote *decimal.Sum) (kb []byte, ok bool) {
	if d.cfg.MaxRecordBytes > 0 && len(value) > d.cfg.MaxRecordBytes {
		return nil, d.fail(Rejection{Reason: ReasonOversized,
			Detail: fmt.Sprintf("record is %d bytes, the limit is %d", len(value), d.cfg.MaxRecordBytes)})
	}
	d.caps = [numFields]span{}
	if d.shape.n == 0 || !d.shape.match(value, &d.caps) {
		if !d.scanGeneral(value) {
			return nil, false
		}
	}
	c := &d.caps
	// Key first, so that every later rejection can name it.
	switch c[fKey].kind {
	case kindNone, kindNull:
		return nil, d.fail(Rejection{Reason: ReasonMissingField, Detail: fmt.Sprintf("field %q is missing", d.names[fKey])})
	case kindString, kindNumber:
		kb = value[c[fKey].start:c[fKey].end]
	case kindEsc:
		d.keyBuf = unescape(d.keyBuf[:0], value[c[fKey].start:c[fKey].end])
		kb = d.keyBuf
	}
	if len(kb) == 0 {
		return nil, d.fail(Rejection{Reason: ReasonMissingField, Detail: fmt.Sprintf("field %q must be a non-empty string or a number", d.names[fKey])})
	}
	action := candle.ActionTrade
	if d.names[fAction] != "" && c[fAction].kind != kindNone && c[fAction].kind != kindNull {
		var detail string
		if action, detail = d.action(value); detail != "" {
			return nil, d.fail(Rejection{Reason: ReasonInvalidAction, Key: string(kb), Detail: detail})
		}
	}
	required := [...]int{fTime, fPrice, fQty, fSide, fMaker}
	n := len(required)
	if action == candle.ActionCancel {
		n = 1 // a cancel's price, qty and side are not read
	}
	for _, f := range required[:n] {
		if d.names[f] != "" && (c[f].kind == kindNone || c[f].kind == kindNull) {
			return nil, d.fail(Rejection{Reason: ReasonMissingField, Key: string(kb), Detail: fmt.Sprintf("field %q is missing", d.names[f])})
		}
	}
	rawKey := func() string { return string(kb) }
	// Trade id: optional, a string or a number (7 and "7" are the same id).
	t.ID = ""
	if d.names[fID] != "" {
		switch sp := c[fID]; sp.kind {
		case kindString, kindNumber:
			if sp.end > sp.start {
				t.ID = unsafe.String(&value[sp.start], sp.end-sp.start)
			}
		case kindEsc: // rare: a copy, so t.ID never aliases scratch space
			d.idBuf = unescape(d.idBuf[:0], value[sp.start:sp.end])
			t.ID = string(d.idBuf)
		case kindNone, kindNull:
		default:
			return nil, d.fail(Rejection{Reason: ReasonMissingField, Key: rawKey(),
				Detail: fmt.Sprintf("field %q must be a string or a number", d.names[fID])})
		}
	}
	if action != candle.ActionTrade && t.ID == "" {
		return nil, d.fail(Rejection{Reason: ReasonMissingField, Key: rawKey(),
			Detail: fmt.Sprintf("field %q is missing: a %s names the trade it takes back by its id", d.names[fID], actionName(action))})
	}
	// Event time.
	ts, err := d.eventTime(value, c[fTime])
	if err != nil {
		return nil, d.fail(Rejection{Reason: ReasonInvalidTS, Key: rawKey(),
			Detail: fmt.Sprintf("field %q: %v", d.names[fTime], err)})
	}
	t.Action = action
	if action == candle.ActionCancel {
		t.TS, t.Price, t.Qty, t.Side = ts, decimal.Zero, decimal.Zero, candle.SideNone
		*quote = decimal.Sum{}
		return kb, true
	}
	price, pf, detail := d.positive(value, c[fPrice], fPrice)
	if detail != "" {
		return nil, d.fail(Rejection{Reason: ReasonInvalidPrice, Key: rawKey(), Detail: detail})
	}
	qty, qf := d.one, fixed{1, 0}
	if d.names[fQty] != "" {
		if qty, qf, detail = d.positive(value, c[fQty], fQty); detail != "" {
			return nil, d.fail(Rejection{Reason: ReasonInvalidQty, Key: rawKey(), Detail: detail})
		}
	}
	side := candle.SideNone
	if d.hasSide() {
		if side, detail = d.side(value); detail != "" {
			return nil, d.fail(Rejection{Reason: ReasonInvalidSide, Key: rawKey(), Detail: detail})
		}
	}
	q, fast := pf.mul(qf) // a zero mant (not parsed fast) never takes this path
	t.TS, t.Price, t.Qty, t.Side = ts, price, qty, side
	if !fast || pf.mant == 0 || qf.mant == 0 {
		// Exact whatever its size: widens when it needs more than 18 places.
		*quote = decimal.Product(price, qty)
	} else {
		*quote = decimal.SumOf(q)
	}
	return kb, true
}

// HasSide reports whether the decoder maps an aggressor side (fields.side
// or fields.buyer_maker): its trades then carry one, and candles their
// taker buy volumes.
func (d *Decoder) HasSide() bool { return d.hasSide() }

// HasAction reports whether the decoder maps an action field: its records
// may then be cancels and corrections (Trade.Action) as well as trades.
func (d *Decoder) HasAction() bool { return d.names[fAction] != "" }

func (d *Decoder) hasSide() bool { return d.names[fSide] != "" || d.names[fMaker] != "" }

// side reads the aggressor side of the record just scanned (the field was
// found: scan checked). A non-empty detail says why the value is neither.
func (d *Decoder) side(value []byte) (candle.Side, string) {
	if d.names[fMaker] != "" {
		switch d.caps[fMaker].kind {
		case kindTrue: // the buyer made the book: the taker sold
			return candle.SideSell, ""
		case kindFalse:
			return candle.SideBuy, ""
		}
		sp := d.caps[fMaker]
		if sp.kind == kindString || sp.kind == kindEsc {
			sp.start, sp.end = sp.start-1, sp.end+1 // show its quotes: "true" is not true
		}
		return candle.SideNone, fmt.Sprintf("field %q is %s: it must be the JSON boolean true (the buyer was the maker: the taker sold) or false (the taker bought)",
			d.names[fMaker], strings.ToValidUTF8(string(value[sp.start:sp.end]), "\uFFFD"))
	}
	raw, str := d.text(value, fSide)
	switch {
	case str && foldEq(raw, "buy"):
		return candle.SideBuy, ""
	case str && foldEq(raw, "sell"):
		return candle.SideSell, ""
	}
	return candle.SideNone, fmt.Sprintf("field %q = %q must be \"buy\" or \"sell\" (any letter case)", d.names[fSide], raw)
}

// action reads the action of the record just scanned (the field was found,
// not null: scan checked). A non-empty detail says why the value is none of
// ActionValues.
func (d *Decoder) action(value []byte) (candle.Action, string) {
	raw, str := d.text(value, fAction)
	switch {
	case !str:
	case foldEq(raw, "trade"), foldEq(raw, "new"):
		return candle.ActionTrade, ""
	case foldEq(raw, "cancel"), foldEq(raw, "break"), foldEq(raw, "bust"):
		return candle.ActionCancel, ""
	case foldEq(raw, "correct"), foldEq(raw, "correction"):
		return candle.ActionCorrect, ""
	}
	return candle.ActionTrade, fmt.Sprintf("field %q = %q must be %s", d.names[fAction], raw, ActionValues)
}

// text returns the bytes of field f of the record just scanned, and whether
// they are a JSON string's; escapes are resolved into scratch space
// ("b\u0075y" is "buy"), so the bytes are valid until the next call.
func (d *Decoder) text(value []byte, f int) (raw []byte, str bool) {
	sp := d.caps[f]
	raw = value[sp.start:sp.end]
	if sp.kind == kindEsc {
		d.tsBuf = unescape(d.tsBuf[:0], raw)
		return d.tsBuf, true
	}
	return raw, sp.kind == kindString
}

// foldEq reports whether raw spells word (lower-case ASCII letters) in any
// ASCII letter case, without allocating.
func foldEq(raw []byte, word string) bool {
	if len(raw) != len(word) {
		return false
	}
	for i := range len(word) {
		if raw[i]|0x20 != word[i] {
			return false
		}
	}
	return true
}

// actionName names a for details.
func actionName(a candle.Action) string {
	switch a {
	case candle.ActionCancel:
		return "cancel"
	case candle.ActionCorrect:
		return "correction"
	}
	return "trade"
}

// scanGeneral validates value with the general scanner and fills d.caps;
// on success it caches value's shape for the next record.
func (d *Decoder) scanGeneral(value []byte) bool {
	d.caps = [numFields]span{}
	d.rec.n, d.rec.bad = 0, d.noShape
	s := scanner{b: value, cap: &d.caps, rec: &d.rec}
	s.ws()
	isObj := s.pos < len(value) && value[s.pos] == '{'
	root := d.root
	if !isObj {
		root = nil
	}
	if _, ok := s.value(root, 0); !ok {
		return d.fail(Rejection{Reason: ReasonMalformedJSON, Detail: fmt.Sprintf("invalid JSON near byte %d", s.pos)})
	}
	if s.ws(); s.pos != len(value) {
		return d.fail(Rejection{Reason: ReasonMalformedJSON, Detail: fmt.Sprintf("unexpected data after the JSON value at byte %d", s.pos)})
	}
	if !isObj {
		return d.fail(Rejection{Reason: ReasonNotObject, Detail: "record is valid JSON but not an object"})
	}
	d.shape.learn(value, &d.rec)
	return true
}

// intern returns the stable string of the key spelled kb, or rejects it
// (into d.rej) when a whitelist is set and does not hold it.
func (d *Decoder) intern(kb []byte) (string, bool) {
	if s := d.keys.lookup(kb); s != nil {
		return s.key, true
	}
	if rej, bad := keyRejection(kb, d.whitelist); bad {
		return "", d.fail(rej)
	}
	if d.keys.len() >= maxInterned {
		d.keys.clear()
	}
	key := string(kb)
	d.keys.put(key, struct{}{})
	return key, true
}

// fail records why a record is rejected (read back from d.rej: returning
// the large Rejection by value costs more than the rest of a decode).
func (d *Decoder) fail(rej Rejection) bool {
	d.rej = rej
	return false
}

func (d *Decoder) eventTime(value []byte, sp span) (int64, error) {
	raw := value[sp.start:sp.end]
	switch sp.kind {
	case kindNumber:
		return candle.ParseEventTime(raw, false)
	case kindString:
		return candle.ParseEventTime(raw, true)
	case kindEsc:
		d.tsBuf = unescape(d.tsBuf[:0], raw)
		return candle.ParseEventTime(d.tsBuf, true)
	}
	return 0, candle.ErrTime
}

// positive parses a price or qty: a JSON number or numeric string, > 0 and
// < 10^20, with at most 18 decimal places. A non-empty detail says what is wrong.
// When the number took the fast path, fx holds it (else fx.mant is 0).
func (d *Decoder) positive(value []byte, sp span, f int) (v decimal.Decimal, fx fixed, detail string) {
	raw := value[sp.start:sp.end]
	if sp.kind != kindNumber && sp.kind != kindString {
		return decimal.Zero, fx, fmt.Sprintf("field %q must be a number or a numeric string", d.names[f])
	}
	fx, ok := parseFixedWord(value, sp.start, sp.end)
	if !ok {
		fx, ok = parseFixed(raw)
	}
	if ok && fx.mant > 0 {
		return fx.decimal(), fx, ""
	}
	v, detail = d.positiveSlow(raw, f)
	return v, fixed{}, detail
}

func (d *Decoder) positiveSlow(raw []byte, f int) (decimal.Decimal, string) {
	v, err := decimal.Parse(raw)
	if err == nil && v.Sign() > 0 && v.InInputRange() {
		return v, ""
	}
	switch {
	case errors.Is(err, decimal.ErrPrecision):
		return v, fmt.Sprintf("field %q = %q has more than %d decimal places", d.names[f], raw, decimal.Scale)
	case errors.Is(err, decimal.ErrRange), err == nil && !v.InInputRange():
		return v, fmt.Sprintf("field %q = %q is out of range: it must be below 10^%d", d.names[f], raw, decimal.MaxIntDigits)
	case err != nil:
		return v, fmt.Sprintf("field %q = %q is not a number", d.names[f], raw)
	case v.Sign() <= 0:
		return v, fmt.Sprintf("field %q = %q must be positive", d.names[f], raw)
	}
	return v, ""
}
