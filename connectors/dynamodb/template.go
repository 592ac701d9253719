package dynamodb

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"
)

// placeholder is one {name} of a key template.
type placeholder uint8

const (
	phLiteral placeholder = iota
	phSymbol
	phTimeframe
	phOpenTime
	phCloseTime
	phTS
	phTradeID
	phYYYY
	phMM
	phDD
	phHH
	phShard
	phField // an event field (lit holds its name)
)

var placeholders = map[string]placeholder{
	"symbol": phSymbol, "timeframe": phTimeframe, "open_time": phOpenTime, "close_time": phCloseTime,
	"ts": phTS, "trade_id": phTradeID, "yyyy": phYYYY, "mm": phMM, "dd": phDD, "hh": phHH, "shard": phShard,
}

type part struct {
	ph  placeholder
	lit string
}

// template is a parsed key template such as "{symbol}#{yyyy}-{mm}-{dd}".
type template struct {
	src   string
	parts []part
}

func parseTemplate(s string) (template, error) {
	t := template{src: s}
	rest := s
	for rest != "" {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			t.parts = append(t.parts, part{lit: rest})
			break
		}
		if i > 0 {
			t.parts = append(t.parts, part{lit: rest[:i]})
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return template{}, fmt.Errorf("template %q: unclosed '{'", s)
		}
		name := rest[i+1 : i+j]
		ph, ok := placeholders[name]
		if f, isField := eventField(name); isField {
			t.parts = append(t.parts, part{ph: phField, lit: f})
			rest = rest[i+j+1:]
			continue
		}
		if !ok {
			return template{}, fmt.Errorf("template %q: unknown placeholder {%s}; use one of {symbol} {timeframe} {open_time} {close_time} {ts} {trade_id} {yyyy} {mm} {dd} {hh} {shard}, or for events {device} {event} {level} {action} {owner} {field:NAME}", s, name)
		}
		t.parts = append(t.parts, part{ph: ph})
		rest = rest[i+j+1:]
	}
	if strings.ContainsRune(strings.Join(t.literals(), ""), '}') {
		return template{}, fmt.Errorf("template %q: stray '}'", s)
	}
	return t, nil
}

func (t template) literals() []string {
	var out []string
	for _, p := range t.parts {
		if p.ph == phLiteral {
			out = append(out, p.lit)
		}
	}
	return out
}

func (t template) uses(ph placeholder) bool {
	for _, p := range t.parts {
		if p.ph == ph {
			return true
		}
	}
	return false
}

// numeric reports whether t renders a bare integer (for N sort keys).
func (t template) numeric() bool {
	if len(t.parts) != 1 {
		return false
	}
	switch t.parts[0].ph {
	case phOpenTime, phCloseTime, phTS:
		return true
	}
	return false
}

// leadingTime reports whether t starts with the item's time ({open_time} or
// {ts}), so that its sort order follows time and ranges can use BETWEEN.
func (t template) leadingTime() bool {
	return len(t.parts) > 0 && (t.parts[0].ph == phOpenTime || t.parts[0].ph == phTS)
}

// vars are the values a template renders from. ts is the item time: a
// candle's open_time or a trade's event time.
type vars struct {
	symbol, timeframe, tradeID string
	openTime, closeTime, ts    int64
	shard                      int
	fields                     map[string]string // events: their fields as text
}

func (t template) append(b []byte, v *vars) []byte {
	var tm time.Time
	timeSet := false
	utc := func() time.Time {
		if !timeSet {
			tm, timeSet = time.UnixMilli(v.ts).UTC(), true
		}
		return tm
	}
	for _, p := range t.parts {
		switch p.ph {
		case phLiteral:
			b = append(b, p.lit...)
		case phSymbol:
			b = append(b, v.symbol...)
		case phTimeframe:
			b = append(b, v.timeframe...)
		case phOpenTime:
			b = strconv.AppendInt(b, v.openTime, 10)
		case phCloseTime:
			b = strconv.AppendInt(b, v.closeTime, 10)
		case phTS:
			b = strconv.AppendInt(b, v.ts, 10)
		case phTradeID:
			b = append(b, v.tradeID...)
		case phYYYY:
			b = appendPadded(b, utc().Year(), 4)
		case phMM:
			b = appendPadded(b, int(utc().Month()), 2)
		case phDD:
			b = appendPadded(b, utc().Day(), 2)
		case phHH:
			b = appendPadded(b, utc().Hour(), 2)
		case phShard:
			b = appendPadded(b, v.shard, 2)
		case phField:
			b = append(b, v.fields[p.lit]...)
		}
	}
	return b
}

func (t template) render(v *vars) string { return string(t.append(nil, v)) }

func appendPadded(b []byte, n, width int) []byte {
	s := strconv.Itoa(n)
	for i := len(s); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

// shardOf picks the write shard of an item from its rendered sort key.
func shardOf(sk string, shards int) int {
	if shards <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(sk))
	return int(h.Sum32() % uint32(shards))
}
