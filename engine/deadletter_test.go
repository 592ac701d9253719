package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kandle/kandle/processors"
)

// envelope is a dead letter as a strict reader sees it.
type envelope struct {
	Reason, Detail, Stage, Topic string
	Partition                    int32
	Offset                       int64
	Record                       *string `json:"record"`
	RecordBase64                 *string `json:"record_base64"`
	Truncated                    bool    `json:"record_truncated"`
	Bytes                        int     `json:"record_bytes"`
	SHA256                       string  `json:"record_sha256"`
}

// checkDeadLetter decodes a dead letter strictly and checks that it stands
// for r: valid JSON, at most MaxDeadLetterBytes, the record whole or a
// prefix of it with its size and hash.
func checkDeadLetter(t testing.TB, b []byte, r *processors.Rejection) envelope {
	t.Helper()
	if len(b) > MaxDeadLetterBytes {
		t.Fatalf("dead letter is %d bytes, more than %d", len(b), MaxDeadLetterBytes)
	}
	if !json.Valid(b) {
		t.Fatalf("dead letter is not valid JSON: %.200q", b)
	}
	var e envelope
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("encoding/json cannot read the dead letter: %v (%.200q)", err, b)
	}
	var got []byte
	switch {
	case e.Record != nil && e.RecordBase64 == nil:
		got = []byte(*e.Record)
	case e.RecordBase64 != nil && e.Record == nil:
		var err error
		if got, err = base64.StdEncoding.DecodeString(*e.RecordBase64); err != nil {
			t.Fatalf("record_base64: %v", err)
		}
	default:
		t.Fatalf("dead letter has neither or both record forms: %.200q", b)
	}
	if e.Reason != string(r.Reason) || e.Partition != r.Partition || e.Offset != r.Offset {
		t.Fatalf("envelope %+v does not describe %s p%d@%d", e, r.Reason, r.Partition, r.Offset)
	}
	if !e.Truncated {
		if !bytes.Equal(got, r.Value) {
			t.Fatalf("record reads back as %.100q, want %.100q", got, r.Value)
		}
		return e
	}
	sum := sha256.Sum256(r.Value)
	if !bytes.HasPrefix(r.Value, got) || e.Bytes != len(r.Value) || e.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("truncated record: %d bytes kept, record_bytes %d (want %d), sha %s", len(got), e.Bytes, len(r.Value), e.SHA256)
	}
	if len(got) == 0 {
		t.Fatalf("truncated record keeps nothing")
	}
	return e
}

func TestDeadLetterPoison(t *testing.T) {
	ctl := bytes.Repeat([]byte{0x01, 0x1f, '"', '\\', '\n'}, 900_000/5) // 900 kB of control characters
	bin := append(bytes.Repeat([]byte{0xff, 0x00}, 450_000), 'x')       // not UTF-8
	for _, tc := range []struct {
		name      string
		value     []byte
		truncated bool
	}{
		{"small", []byte(`{"s":"BTC","p":"1"}`), false},
		{"control characters", ctl, true},
		{"invalid UTF-8", bin, true},
		{"line separators", []byte(strings.Repeat("\u2028", 100_000)), true},
		{"large plain text fits", bytes.Repeat([]byte("a"), 200_000), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &processors.Rejection{Reason: processors.ReasonOversized, Detail: "record is huge \x00\xff",
				Key: "BTC\x01", Partition: 2, Offset: 77, Value: tc.value}
			rec := deadLetter("dlq", "c1m", "trades\x7f", r)
			e := checkDeadLetter(t, rec.Value, r)
			if e.Truncated != tc.truncated {
				t.Fatalf("truncated = %v, want %v", e.Truncated, tc.truncated)
			}
			if string(rec.Headers[0].Value) != string(r.Reason) {
				t.Fatalf("reason header %q", rec.Headers[0].Value)
			}
		})
	}
}

// FuzzDeadLetter: whatever a rejection holds, its dead letter is strict
// JSON within MaxDeadLetterBytes that gives back the record (or a prefix,
// its size and its hash) and the rejection's place.
func FuzzDeadLetter(f *testing.F) {
	f.Add([]byte(`{"s":"BTC","t":1,"p":"1","q":"1"}`), "BTC", "field \"p\" is bad", int64(5))
	f.Add([]byte("\x00\x01\xff\xfe\"\\\u2028"), "\xff", "\x00", int64(0))
	f.Add(bytes.Repeat([]byte{0x01}, 70_000), "k", "", int64(1<<40))
	f.Fuzz(func(t *testing.T, value []byte, key, detail string, offset int64) {
		r := &processors.Rejection{Reason: processors.ReasonMalformedJSON, Detail: detail, Key: key,
			Partition: 1, Offset: offset, Value: value}
		rec := deadLetter("dlq", "stage", "topic", r)
		checkDeadLetter(t, rec.Value, r)
		if len(rec.Key) > maxTextBytes || (len(key) <= maxTextBytes && string(rec.Key) != key) {
			t.Fatalf("record key %q for rejection key %q", rec.Key, key)
		}
		if e := checkDeadLetter(t, rec.Value, r); utf8.ValidString(detail) && len(detail) <= maxTextBytes && e.Detail != detail {
			t.Fatalf("detail %q reads back as %q", detail, e.Detail)
		}
	})
}
