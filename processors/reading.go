package processors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/kandle/kandle/candle"
)

// readingDecoder decodes device readings (multi-metric candles, silence)
// with the trade decoder's rules for sizes, keys, times and bad input, in
// its order and with its reason codes: oversized; malformed_json /
// not_object; missing_field (key or time); invalid_ts; invalid_key (a
// control character or invalid UTF-8 in the key, escapes resolved as for
// trades); unknown_key (not in the symbols list); key_mismatch (key_check).
type readingDecoder struct {
	key, ts   []string
	keyName   string // the key field's dotted path, for details
	tsName    string
	maxSize   int
	whitelist map[string]bool // nil: every key
	keyCheck  bool
	keyBuf    []byte // the key with its escapes resolved
	tsBuf     []byte // the time, likewise
}

func newReadingDecoder(key, ts string, symbols []string, maxSize int, keyCheck bool) readingDecoder {
	d := readingDecoder{key: strings.Split(key, "."), ts: strings.Split(ts, "."), keyName: key, tsName: ts,
		maxSize: maxSize, keyCheck: keyCheck}
	if len(symbols) > 0 {
		d.whitelist = map[string]bool{}
		for _, s := range symbols {
			d.whitelist[s] = true
		}
	}
	return d
}

// decodedReading is one decoded reading.
type decodedReading struct {
	obj   map[string]json.RawMessage
	id    string          // the key field's value: its string, or a number's text
	ts    int64           // event time, Unix ms
	rawTS json.RawMessage // the time field as written
}

// decode reads rec. A record that fails is rejected into out and ok is false.
func (d *readingDecoder) decode(rec Record, out *Output) (r decodedReading, ok bool) {
	if d.maxSize > 0 && len(rec.Value) > d.maxSize {
		reject(out, rec, Rejection{Reason: ReasonOversized, Detail: fmt.Sprintf("record is %d bytes, the limit is %d", len(rec.Value), d.maxSize)})
		return r, false
	}
	if err := json.Unmarshal(rec.Value, &r.obj); err != nil {
		reason := ReasonMalformedJSON
		if json.Valid(rec.Value) {
			reason = ReasonNotObject
		}
		reject(out, rec, Rejection{Reason: reason, Detail: err.Error()})
		return r, false
	}
	rawKey, found := lookup(r.obj, d.key)
	if !found {
		reject(out, rec, Rejection{Reason: ReasonMissingField, Detail: fmt.Sprintf("field %q is missing", d.keyName)})
		return r, false
	}
	kb, isKey := d.keyBytes(rawKey)
	if !isKey {
		reject(out, rec, Rejection{Reason: ReasonMissingField, Detail: fmt.Sprintf("field %q must be a non-empty string or a number", d.keyName)})
		return r, false
	}
	r.id = string(kb)
	if r.rawTS, found = lookup(r.obj, d.ts); !found {
		reject(out, rec, Rejection{Reason: ReasonMissingField, Key: r.id, Detail: fmt.Sprintf("field %q is missing", d.tsName)})
		return r, false
	}
	var err error
	if r.ts, err = d.eventTime(r.rawTS); err != nil {
		reject(out, rec, Rejection{Reason: ReasonInvalidTS, Key: r.id, Detail: fmt.Sprintf("field %q: %v", d.tsName, err)})
		return r, false
	}
	if rej, bad := keyRejection(kb, d.whitelist != nil && !d.whitelist[r.id]); bad {
		reject(out, rec, rej)
		return r, false
	}
	if d.keyCheck && string(rec.Key) != r.id {
		reject(out, rec, d.keyMismatch(rec.Key, r.id))
		return r, false
	}
	return r, true
}

// keyBytes returns the key a JSON value spells (a string with its escapes
// resolved as the trade decoder resolves them, or a number's text), or
// false for an empty string or another kind of value.
func (d *readingDecoder) keyBytes(raw json.RawMessage) ([]byte, bool) {
	switch {
	case len(raw) > 2 && raw[0] == '"':
		body := raw[1 : len(raw)-1]
		if bytes.IndexByte(body, '\\') < 0 {
			return body, true
		}
		d.keyBuf = unescape(d.keyBuf[:0], body)
		return d.keyBuf, len(d.keyBuf) > 0
	case len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9'):
		return raw, true
	}
	return nil, false
}

// eventTime parses a time field as the trade decoder does: epoch ms (a
// number) or RFC 3339 (a string).
func (d *readingDecoder) eventTime(raw json.RawMessage) (int64, error) {
	switch {
	case len(raw) >= 2 && raw[0] == '"':
		body := raw[1 : len(raw)-1]
		if bytes.IndexByte(body, '\\') >= 0 {
			d.tsBuf = unescape(d.tsBuf[:0], body)
			body = d.tsBuf
		}
		return candle.ParseEventTime(body, true)
	case len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9'):
		return candle.ParseEventTime(raw, false)
	}
	return 0, candle.ErrTime
}

// keyMismatch is the key_mismatch rejection of a reading whose record key
// is not its device id (recKey nil: the record has no key).
func (d *readingDecoder) keyMismatch(recKey []byte, id string) Rejection {
	what := fmt.Sprintf("record key %q differs from", recKey)
	if recKey == nil {
		what = "the record has no key;"
	}
	return Rejection{Reason: ReasonKeyMismatch, Key: id, Detail: fmt.Sprintf("%s field %q = %q: produce each "+
		"reading with its device id as the record key so one device stays in one partition, or set key_check: false on the source",
		what, d.keyName, id)}
}

// keyRejection says whether kb is refused as a key, whatever the kind:
// invalid_key when it is not printable UTF-8, else unknown_key when
// unlisted (not in the source's symbols list).
func keyRejection(kb []byte, unlisted bool) (Rejection, bool) {
	if detail := candle.KeyProblem(kb); detail != "" {
		return Rejection{Reason: ReasonInvalidKey, Key: string(kb),
			Detail: fmt.Sprintf("key %q %s: keys must be printable UTF-8", kb, detail)}, true
	}
	if unlisted {
		return Rejection{Reason: ReasonUnknownKey, Key: string(kb),
			Detail: fmt.Sprintf("key %q is not in the symbols list", kb)}, true
	}
	return Rejection{}, false
}
