package topotest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// wantEvent is an expected event of a silence processor: the fields given
// are compared with the event's JSON fields (times as instants, so any
// offset or epoch milliseconds match; other values as their text).
type wantEvent struct {
	fields map[string]string
	keys   []string
	line   int
}

// gotEvent is one produced event, its fields as text.
type gotEvent struct {
	fields map[string]string
	raw    string
}

func parseWantEvent(n *yaml.Node) (wantEvent, error) {
	w := wantEvent{fields: map[string]string{}, line: n.Line}
	if n.Kind != yaml.MappingNode {
		return w, errAt(n, "an expected event is a mapping like {device: d1, event: unreachable, due_at: \"2026-01-04T00:00:00Z\"}")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if v.Kind != yaml.ScalarNode {
			return w, errAt(v, "%s must be a single value", k.Value)
		}
		if isTimeField(k.Value) {
			if _, err := parseTime(v); err != nil {
				return w, err
			}
		}
		w.fields[k.Value] = v.Value
		w.keys = append(w.keys, k.Value)
	}
	return w, nil
}

// isTimeField reports the event fields that hold instants.
func isTimeField(k string) bool {
	return strings.HasSuffix(k, "_at") || k == "last_seen" || k == "last_ingested"
}

func toGotEvent(value []byte) gotEvent {
	g := gotEvent{fields: map[string]string{}, raw: string(value)}
	var m map[string]json.RawMessage
	if json.Unmarshal(value, &m) != nil {
		return g
	}
	for k, v := range m {
		var s string
		if json.Unmarshal(v, &s) == nil {
			g.fields[k] = s
		} else {
			g.fields[k] = string(v)
		}
	}
	return g
}

func (w *wantEvent) mismatches(g *gotEvent) []string {
	var out []string
	for _, k := range w.keys {
		want, have := w.fields[k], g.fields[k]
		if isTimeField(k) {
			a, errA := parseTime(&yaml.Node{Value: want})
			b, errB := parseTime(&yaml.Node{Value: have})
			if errA == nil && errB == nil && a == b {
				continue
			}
		} else if want == have {
			continue
		}
		out = append(out, fmt.Sprintf("%s: want %s, got %s", k, want, have))
	}
	return out
}

func (w *wantEvent) String() string {
	parts := make([]string, len(w.keys))
	for i, k := range w.keys {
		parts[i] = k + ": " + w.fields[k]
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// formatEvent renders an event in a stable order of its fields.
func formatEvent(g *gotEvent) string {
	keys := slices.Sorted(maps.Keys(g.fields))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ": " + g.fields[k]
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func (d *diffWriter) events(stage string, wants []wantEvent, gots []gotEvent, exactly bool) {
	ops := align(len(wants), len(gots), func(w, g int) bool { return len(wants[w].mismatches(&gots[g])) == 0 })
	var lines []line
	bad := 0
	for _, blk := range blocks(ops) {
		for _, kind := range []byte{' ', '-', '+'} {
			for _, o := range blk {
				switch {
				case o.kind != kind:
				case kind == ' ':
					lines = append(lines, line{text: "    " + formatEvent(&gots[o.got])})
				case kind == '-':
					bad++
					w := &wants[o.want]
					lines = append(lines, line{text: fmt.Sprintf("  - %s   (line %d)", w, w.line), keep: true})
				case exactly:
					bad++
					lines = append(lines, line{text: "  + " + formatEvent(&gots[o.got]), keep: true})
				}
			}
		}
	}
	if bad == 0 {
		return
	}
	d.failed += bad
	fmt.Fprintf(&d.b, "%s: %d of %d expected events matched, %d produced (- want, + got):\n",
		stage, len(wants)-countKind(ops, '-'), len(wants), len(gots))
	d.write(lines)
}

// parseAt reads a block's at: (ingestion time of its records) or an
// advance: time, in Unix ms.
func parseAt(v *yaml.Node) (int64, error) {
	ms, err := parseTime(v)
	if err != nil {
		return 0, err
	}
	if ms <= 0 {
		return 0, errAt(v, "%q: the time must be after 1970", v.Value)
	}
	return ms, nil
}
