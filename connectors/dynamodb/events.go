package dynamodb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// eventFields are the event placeholders of key templates; {field:NAME}
// reaches any other field (a carried one such as a site id).
var eventFields = map[string]bool{"device": true, "event": true, "level": true, "action": true, "owner": true}

// eventField reports whether {name} is an event placeholder and its field.
func eventField(name string) (string, bool) {
	if f, ok := strings.CutPrefix(name, "field:"); ok && f != "" {
		return f, true
	}
	return name, eventFields[name]
}

// usesFields reports whether t renders event fields.
func (t template) usesFields() bool { return t.uses(phField) }

// usesCandleOnly reports whether t renders placeholders events lack.
func (t template) usesCandleOnly() bool {
	for _, ph := range []placeholder{phSymbol, phTimeframe, phOpenTime, phCloseTime, phTradeID} {
		if t.uses(ph) {
			return true
		}
	}
	return false
}

// WriteEvents upserts events (JSON objects such as the silence processor's
// alerts) as items keyed by the pk/sk templates rendered from their fields,
// e.g. pk DEVICE#{owner}, sk {device}#{event}: one item per device and
// event, so redelivery rewrites the same item. Every top-level field
// becomes an attribute (strings S, numbers N); {ts}/{yyyy}… render the
// event's time (fired_at, else recovered_at) and the TTL counts from it.
// An event whose key cannot render (a missing field) is logged, counted
// and skipped: retrying could never store it.
func (s *Sink) WriteEvents(ctx context.Context, events [][]byte) error {
	if s.pk.usesCandleOnly() || s.sk.usesCandleOnly() {
		return fmt.Errorf("table %s: the key templates use candle or trade placeholders ({symbol} {timeframe} {open_time} {close_time} {trade_id}); events have {device} {event} {level} {action} {owner} {field:NAME} {ts}", s.cfg.Table.Name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("dynamodb sink: WriteEvents after Close")
	}
	for _, ev := range events {
		p, err := s.eventItem(ev)
		if err != nil {
			s.m.errors.WithLabelValues(s.cfg.Table.Name, "rejected").Inc()
			s.log.Error("event cannot be stored; skipped", "err", err, "event", string(ev))
			continue
		}
		s.buf = append(s.buf, p)
	}
	s.m.buffered.WithLabelValues(s.cfg.Table.Name).Set(float64(len(s.buf)))
	if len(s.buf) >= s.cfg.BufferItems {
		return s.flushLocked(ctx)
	}
	return nil
}

func (s *Sink) eventItem(ev []byte) (pending, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(ev, &raw); err != nil {
		return pending{}, fmt.Errorf("event is not a JSON object: %w", err)
	}
	v := vars{fields: map[string]string{}}
	t := s.cfg.Table
	item := map[string]types.AttributeValue{}
	for k, r := range raw {
		var str string
		var num json.Number
		switch {
		case json.Unmarshal(r, &str) == nil:
			v.fields[k] = str
			item[k] = strAttr(str)
		case json.Unmarshal(r, &num) == nil:
			v.fields[k] = num.String()
			item[k] = &types.AttributeValueMemberN{Value: num.String()}
		default:
			v.fields[k] = string(r)
			item[k] = strAttr(string(r))
		}
	}
	for _, f := range []string{"fired_at", "recovered_at"} {
		if at, err := time.Parse(time.RFC3339Nano, v.fields[f]); err == nil {
			v.ts, v.openTime, v.closeTime = at.UnixMilli(), at.UnixMilli(), at.UnixMilli()
			break
		}
	}
	pk, sk, err := s.keyAttrs(&v)
	if err != nil {
		return pending{}, err
	}
	if strings.Contains(pk+sk, "{") || pk == "" || sk == "" {
		return pending{}, fmt.Errorf("event key renders %q / %q", pk, sk)
	}
	for _, f := range append(s.pk.fieldNames(), s.sk.fieldNames()...) {
		if v.fields[f] == "" {
			return pending{}, fmt.Errorf("event has no %q field for the key templates", f)
		}
	}
	item[t.PKAttribute] = strAttr(pk)
	item[t.SKAttribute] = s.skAttr(sk)
	if ttl := time.Duration(s.cfg.TTL); ttl > 0 && t.TTLAttribute != "" && v.ts > 0 {
		item[t.TTLAttribute] = numAttr(expiry(v.ts, ttl))
	}
	p := pending{key: pk + "\x00" + sk, item: item}
	if n := itemSize(item); n > maxItemBytes {
		return p, fmt.Errorf("%w: item is %d bytes", ErrItemTooLarge, n)
	}
	return p, nil
}

// fieldNames lists the event fields t renders.
func (t template) fieldNames() []string {
	var out []string
	for _, p := range t.parts {
		if p.ph == phField {
			out = append(out, p.lit)
		}
	}
	return out
}
