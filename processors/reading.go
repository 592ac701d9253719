package processors

import (
	"encoding/json"
	"fmt"
	"strings"
)

// readReading checks a device reading's size, decodes it as a JSON object
// and finds its key field: the part every reading processor (multi-metric,
// silence) shares. A record that fails is rejected into out and ok is false.
func readReading(rec Record, maxSize int, key []string, out *Output) (obj map[string]json.RawMessage, rawKey json.RawMessage, ok bool) {
	if maxSize > 0 && len(rec.Value) > maxSize {
		reject(out, rec, Rejection{Reason: ReasonOversized, Detail: fmt.Sprintf("%d bytes > max_record_bytes %d", len(rec.Value), maxSize)})
		return nil, nil, false
	}
	if err := json.Unmarshal(rec.Value, &obj); err != nil {
		reason := ReasonMalformedJSON
		if json.Valid(rec.Value) {
			reason = ReasonNotObject
		}
		reject(out, rec, Rejection{Reason: reason, Detail: err.Error()})
		return nil, nil, false
	}
	if rawKey, ok = lookup(obj, key); !ok {
		reject(out, rec, Rejection{Reason: ReasonMissingField, Detail: fmt.Sprintf("field %q is missing", strings.Join(key, "."))})
	}
	return obj, rawKey, ok
}

// readingKeyMismatch is the key_mismatch rejection of a reading whose record
// key is not its device id (recKey nil: the record has no key).
func readingKeyMismatch(recKey []byte, key []string, id string) Rejection {
	what := fmt.Sprintf("record key %q differs from", recKey)
	if recKey == nil {
		what = "the record has no key;"
	}
	return Rejection{Reason: ReasonKeyMismatch, Key: id, Detail: fmt.Sprintf("%s field %q = %q: produce each "+
		"reading with its device id as the record key so one device stays in one partition, or set key_check: false on the source",
		what, strings.Join(key, "."), id)}
}
