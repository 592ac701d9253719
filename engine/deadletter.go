package engine

import (
	"encoding/base64"
	"strconv"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/processors"
)

// deadLetter builds the dead-letter record of a rejection: the key of the
// original record (when readable) and a JSON envelope with the stable
// reason code, a human-readable detail, where the record came from and the
// record itself (as a string when it is UTF-8, else base64 under
// record_base64). The reason is also a header, for filtering without parsing.
func deadLetter(topic, stage, inputTopic string, r *processors.Rejection) *kgo.Record {
	b := make([]byte, 0, 128+len(r.Value))
	b = append(b, `{"reason":`...)
	b = strconv.AppendQuote(b, string(r.Reason))
	b = append(b, `,"detail":`...)
	b = strconv.AppendQuote(b, r.Detail)
	b = append(b, `,"stage":`...)
	b = strconv.AppendQuote(b, stage)
	b = append(b, `,"topic":`...)
	b = strconv.AppendQuote(b, inputTopic)
	b = append(b, `,"partition":`...)
	b = strconv.AppendInt(b, int64(r.Partition), 10)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, r.Offset, 10)
	if utf8.Valid(r.Value) {
		b = append(b, `,"record":`...)
		b = strconv.AppendQuote(b, string(r.Value))
	} else {
		b = append(b, `,"record_base64":"`...)
		b = appendBase64(b, r.Value)
		b = append(b, '"')
	}
	b = append(b, '}')
	rec := &kgo.Record{Topic: topic, Value: b, Headers: []kgo.RecordHeader{
		{Key: "kandle.reason", Value: []byte(r.Reason)},
	}}
	if r.Key != "" {
		rec.Key = []byte(r.Key)
	}
	return rec
}

func appendBase64(dst, src []byte) []byte {
	return base64.StdEncoding.AppendEncode(dst, src)
}
