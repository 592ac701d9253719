package engine

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/processors"
)

// MaxDeadLetterBytes bounds the value of a dead letter. It is well below the
// 1 MB that Kafka brokers (max.message.bytes) and kandle's producers
// (franz-go's default batch limit, 1,000,012 bytes) accept, so a dead letter
// can always be written and a poison record never stops a stage: when the
// whole record does not fit, the dead letter carries a truncated copy, the
// record's size and its SHA-256.
const MaxDeadLetterBytes = 256 << 10

// envelopeRoom is what the envelope around the record may take: the fixed
// members plus the reason, the detail and the names, each cut to fit.
const envelopeRoom = 8 << 10

// maxTextBytes cuts the detail and name members of an envelope.
const maxTextBytes = 1 << 10

// deadLetter builds the dead-letter record of a rejection: the key of the
// original record (when readable) and a JSON envelope with the stable
// reason code, a human-readable detail, where the record came from and the
// record itself (as a string when it is UTF-8, else base64 under
// record_base64). Every member is valid JSON whatever bytes the record
// holds. A record too large for MaxDeadLetterBytes is cut: the envelope
// then says "record_truncated":true and carries "record_bytes" (the
// original size) and "record_sha256" (hex) of the whole record. The reason
// is also a header, for filtering without parsing.
func deadLetter(topic, stage, inputTopic string, r *processors.Rejection) *kgo.Record {
	b := appendDeadLetter(nil, stage, inputTopic, r)
	rec := &kgo.Record{Topic: topic, Value: b, Headers: []kgo.RecordHeader{
		{Key: "kandle.reason", Value: []byte(r.Reason)},
	}}
	if r.Key != "" {
		key := r.Key
		if len(key) > maxTextBytes {
			key = key[:maxTextBytes]
		}
		rec.Key = []byte(key)
	}
	return rec
}

// appendDeadLetter appends the JSON envelope of r to b (at most
// MaxDeadLetterBytes).
func appendDeadLetter(b []byte, stage, inputTopic string, r *processors.Rejection) []byte {
	v := r.Value
	text := utf8.Valid(v)
	// Room for the record: escaping may make text up to 6 times as long
	// (\u00XX); base64 makes 4 bytes of 3.
	room := MaxDeadLetterBytes - envelopeRoom
	limit := room * 3 / 4
	if text {
		limit = room / 6
		if escapedLen(v) <= room {
			limit = len(v)
		}
	}
	cut := len(v) > limit
	if cut {
		v = v[:limit]
		if text {
			for len(v) > 0 && !utf8.Valid(v) { // cut on a character boundary
				v = v[:len(v)-1]
			}
		}
	}
	b = append(b, `{"reason":`...)
	b = candle.AppendJSONString(b, clip(string(r.Reason)))
	b = append(b, `,"detail":`...)
	b = candle.AppendJSONString(b, clip(r.Detail))
	b = append(b, `,"stage":`...)
	b = candle.AppendJSONString(b, clip(stage))
	b = append(b, `,"topic":`...)
	b = candle.AppendJSONString(b, clip(inputTopic))
	b = append(b, `,"partition":`...)
	b = strconv.AppendInt(b, int64(r.Partition), 10)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, r.Offset, 10)
	if text {
		b = append(b, `,"record":`...)
		b = candle.AppendJSONString(b, string(v))
	} else {
		b = append(b, `,"record_base64":"`...)
		b = base64.StdEncoding.AppendEncode(b, v)
		b = append(b, '"')
	}
	if cut {
		sum := sha256.Sum256(r.Value)
		b = append(b, `,"record_truncated":true,"record_bytes":`...)
		b = strconv.AppendInt(b, int64(len(r.Value)), 10)
		b = append(b, `,"record_sha256":"`...)
		b = hex.AppendEncode(b, sum[:])
		b = append(b, '"')
	}
	return append(b, '}')
}

// clip cuts s to maxTextBytes on a character boundary.
func clip(s string) string {
	if len(s) <= maxTextBytes {
		return s
	}
	s = s[:maxTextBytes]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// escapedLen is the length of AppendJSONString(v) without the quotes, at
// most: control characters and the two JavaScript line separators take 6
// bytes, quotes and backslashes 2.
func escapedLen(v []byte) int {
	n := len(v)
	for _, c := range v {
		switch {
		case c < 0x20:
			n += 5
		case c == '"' || c == '\\':
			n++
		case c == 0xE2: // lead byte of U+2028/U+2029 (3 bytes → 6)
			n += 3
		}
	}
	return n
}
