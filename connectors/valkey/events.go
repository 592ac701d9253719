package valkey

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/kandle/kandle/connectors/sinkkit"

	"github.com/valkey-io/valkey-go"
)

// kindEvent labels the event path in the sink's metrics.
const kindEvent = "event"

// Event keys: the latest event of a device as a hash, and its channel.
func (n names) deviceStatus(device string) string  { return n.prefix + "device:status:" + device }
func (n names) deviceChannel(device string) string { return n.prefix + "pub:device:" + device }

// WriteEvents stores each event (a JSON object with a "device" field, such
// as a silence alert) as the device's current status — hash
// device:status:{device} with the fields status (the event name), event (the
// JSON) and, from the event, level, action, last_seen, fired_at or
// recovered_at — and publishes it on pub:device:{device}. Events of one
// device arrive in order and a redelivered event rewrites the same fields,
// so the hash ends at the latest event. An event without a device is logged
// and counted, not retried. Transient errors are retried with backoff until
// ctx ends.
func (s *Sink) WriteEvents(ctx context.Context, events [][]byte) error {
	b := s.client.B()
	var cmds []valkey.Completed
	for _, ev := range events {
		var f map[string]any
		if err := json.Unmarshal(ev, &f); err != nil {
			s.rejectEvent(ev, "not a JSON object")
			continue
		}
		dev, _ := f["device"].(string)
		name, _ := f["event"].(string)
		if dev == "" || name == "" {
			s.rejectEvent(ev, "no device or event field")
			continue
		}
		h := b.Hset().Key(s.names.deviceStatus(dev)).FieldValue().FieldValue("status", name).FieldValue("event", string(ev))
		for _, k := range []string{"level", "action", "last_seen", "fired_at", "recovered_at", "due_at"} {
			if v, ok := f[k].(string); ok {
				h = h.FieldValue(k, v)
			}
		}
		cmds = append(cmds, h.Build(), b.Publish().Channel(s.names.deviceChannel(dev)).Message(string(ev)).Build())
	}
	if len(cmds) == 0 {
		return nil
	}
	for attempt := 0; ; attempt++ {
		var err error
		for _, r := range s.doMulti(ctx, s.client, cmds...) {
			if e := r.Error(); e != nil && err == nil {
				err = e
			}
		}
		if err == nil {
			s.m.written.WithLabelValues(kindEvent).Add(float64(len(cmds) / 2))
			return nil
		}
		s.m.errors.WithLabelValues(kindEvent).Inc()
		if attempt%20 == 0 {
			s.log.Warn("valkey write of events failed, retrying", "err", err, "attempt", attempt+1)
		}
		if sinkkit.Sleep(ctx, backoff(attempt)) != nil {
			return fmt.Errorf("valkey: %d events not stored: %w", len(cmds)/2, ctx.Err())
		}
	}
}

func (s *Sink) rejectEvent(ev []byte, why string) {
	s.m.rejected.Inc()
	s.log.Error("event cannot be stored; skipped", "why", why, "event", string(ev))
}
