package processors

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Resharding (a Kinesis split or merge) hands a parent shard's keys to the
// child shard whose hash range now holds them, and merges the partition-wide
// state of several parents into one child. How a kind's state entries map
// to record keys, and how its partition-wide entries merge, belongs to the
// kind: a Resharder says it, HandOver does the rest the same way for every
// kind.

// Resharder splits and merges the state entries of one processor kind.
type Resharder interface {
	// EntryKey returns the record key (the Kafka record key, the Kinesis
	// partition key) of the input whose state the entry holds; ok is false
	// for a partition-wide entry, which belongs to no key. Every entry a
	// key's state is made of must name the same key.
	EntryKey(entry []byte) (key string, ok bool, err error)
	// MergePartition returns the value of partition-wide entry key in a
	// shard that continues the given parents, from the values the parents
	// that have the entry hold (in the child's parent order, at least
	// one); nil leaves the entry out. Time-like values never go back.
	MergePartition(key []byte, vals [][]byte) ([]byte, error)
}

// HandOver builds a child shard's first state from its parents' final
// entries (one map per parent, in the child's parent order): every entry of
// a key the child owns, and the partition-wide entries merged by r.
//
// A key's entries always come from one parent, so its state stays whole
// (a silence device and its pending timer, a candle key and its dedupe
// ids). Keys are routed by record key, so with key_check on a key has state
// in one parent only; a key found in several (records of it arrived under
// other keys) keeps the first parent's entries, and conflicts lists it.
func HandOver(r Resharder, parents []map[string][]byte, owns func(key string) bool) (entries map[string][]byte, conflicts []string, err error) {
	entries = map[string][]byte{}
	from := map[string]int{} // record key → the parent whose entries the child keeps
	reported := map[string]bool{}
	parts := map[string][][]byte{}
	for i, pe := range parents {
		for k, v := range pe {
			name, isKey, err := r.EntryKey([]byte(k))
			if err != nil {
				return nil, nil, fmt.Errorf("state entry %q: %w", k, err)
			}
			if !isKey {
				parts[k] = append(parts[k], v)
				continue
			}
			if !owns(name) {
				continue
			}
			if p, ok := from[name]; !ok {
				from[name] = i
			} else if p != i {
				if !reported[name] {
					reported[name] = true
					conflicts = append(conflicts, name)
				}
				continue
			}
			entries[k] = v
		}
	}
	for _, k := range slices.Sorted(maps.Keys(parts)) {
		v, err := r.MergePartition([]byte(k), parts[k])
		if err != nil {
			return nil, nil, fmt.Errorf("merge partition entry %q: %w", k, err)
		}
		if v != nil {
			entries[k] = v
		}
	}
	slices.Sort(conflicts)
	return entries, conflicts, nil
}

// CandleResharder splits and merges the state of a candle Aggregator (the
// candles kind). With Metrics, the aggregator is a MultiMetric's, whose keys
// are series <device>#<metric>: a series belongs to its device's record.
type CandleResharder struct{ Metrics bool }

// EntryKey returns the record key of an aggregator state entry.
func (c CandleResharder) EntryKey(entry []byte) (string, bool, error) {
	key, ok, err := aggregatorEntryKey(entry)
	if err != nil || !ok || !c.Metrics {
		return key, ok, err
	}
	dev, _, found := strings.Cut(key, MetricKeySep)
	if !found {
		return "", false, fmt.Errorf("series %q has no %q: not a multi-metric series: %w", key, MetricKeySep, errCorrupt)
	}
	return dev, true, nil
}

// MergePartition merges the partition entry: the latest max event time and
// the latest record wall time, so the child's watermark never goes back.
func (CandleResharder) MergePartition(key []byte, vals [][]byte) ([]byte, error) {
	if !bytes.Equal(key, []byte{entryPartition}) {
		return nil, fmt.Errorf("not a partition entry: %w", errCorrupt)
	}
	return mergeAggregatorPartition(vals)
}

func aggregatorEntryKey(entry []byte) (string, bool, error) {
	if len(entry) == 0 {
		return "", false, errCorrupt
	}
	switch entry[0] {
	case entryPartition:
		return "", false, nil
	case entryKey:
		return string(entry[1:]), true, nil
	case entryIDs, entryTrades, entryKept: // "i"/"t"/"r"+len+key+…
		r := reader{b: entry[1:]}
		name := r.bytes(r.uvarint())
		if r.err != nil {
			return "", false, r.err
		}
		return string(name), true, nil
	}
	return "", false, fmt.Errorf("not a candle state entry (kind %q): %w", entry[0], errCorrupt)
}

// mergeAggregatorPartition returns the partition entry of a shard that
// continues the given parents: the latest max event time, the latest record
// wall time and the highest watermark, so the child's watermark never goes
// back. Nil values are skipped; the result is nil when all are. The
// watermark is kept only when every parent with a max event time stored one
// (else the child derives it from the max event time, as for state written
// before watermarks were stored).
func mergeAggregatorPartition(vals [][]byte) ([]byte, error) {
	var (
		hasMax, hasWall bool
		maxTS, wall     int64
		any             bool
		wm              int64
		wmAll, hasWM    = true, false
		// reviseFrom: the highest of the parents', kept only when every
		// parent with a watermark stored one (else the child takes its
		// watermark: nothing emitted before it is revisable).
		rf           int64 = noRevFrom
		rfAll, hasRF       = true, false
	)
	for _, v := range vals {
		if v == nil {
			continue
		}
		if len(v) < 2 || !knownVersion(v[0]) {
			return nil, fmt.Errorf("partition entry: %w", errCorrupt)
		}
		r := reader{b: v[2:]}
		m, w := r.varint(), r.varint()
		if v[1]&1 != 0 {
			if v[1]&partWM == 0 {
				wmAll = false
			} else if x := r.varint(); !hasWM || x > wm {
				wm, hasWM = x, true
			}
			if v[1]&partWM == 0 || v[1]&partRev == 0 {
				rfAll = false
			} else if x := r.varint(); !hasRF || x > rf {
				rf, hasRF = x, true
			}
		}
		if r.err != nil {
			return nil, fmt.Errorf("partition entry: %w", r.err)
		}
		any = true
		if v[1]&1 != 0 && (!hasMax || m > maxTS) {
			hasMax, maxTS = true, m
		}
		if v[1]&2 != 0 && (!hasWall || w > wall) {
			hasWall, wall = true, w
		}
	}
	if !any {
		return nil, nil
	}
	bits := boolBits(hasMax, hasWall)
	keepWM := hasMax && hasWM && wmAll
	if keepWM {
		bits |= partWM
	}
	out := []byte{stateVersion, bits}
	out = binary.AppendVarint(out, maxTS)
	out = binary.AppendVarint(out, wall)
	if keepWM {
		out = binary.AppendVarint(out, wm)
		if hasRF && rfAll {
			out[1] |= partRev
			out = binary.AppendVarint(out, rf)
		}
	}
	return out, nil
}

// RollupResharder splits and merges the state of a Rollup: a candle
// symbol's (the record key of its input) key entry and, with a revision
// horizon, its kept window and sub-candle entries; nothing partition-wide.
type RollupResharder struct{}

// EntryKey returns the symbol of a rollup state entry.
func (RollupResharder) EntryKey(entry []byte) (string, bool, error) {
	if len(entry) == 0 {
		return "", false, fmt.Errorf("not a rollup state entry: %w", errCorrupt)
	}
	switch entry[0] {
	case entryKey:
		return string(entry[1:]), true, nil
	case rollWinEntry, rollSubEntry:
		name, _, err := parseRollEntryKey(entry)
		if err != nil {
			return "", false, fmt.Errorf("rollup kept entry: %w", err)
		}
		return name, true, nil
	}
	return "", false, fmt.Errorf("not a rollup state entry (kind %q): %w", entry[0], errCorrupt)
}

// MergePartition fails: a rollup has no partition-wide entries.
func (RollupResharder) MergePartition([]byte, [][]byte) ([]byte, error) {
	return nil, fmt.Errorf("a rollup has no partition-wide entries: %w", errCorrupt)
}

// SilenceResharder splits and merges the state of a Silence processor. A
// device entry and its pending timer belong to the device (its id is the
// record key with key_check), so they move together and the timer stays
// exact: each level fires once per silence, in whichever shard the device
// lives. The ingestion clock is partition-wide: the child continues from
// the latest of its parents'.
type SilenceResharder struct{}

// EntryKey returns the device of a silence state entry.
func (SilenceResharder) EntryKey(entry []byte) (string, bool, error) {
	switch {
	case bytes.Equal(entry, silenceClockKey):
		return "", false, nil
	case len(entry) >= 2 && entry[0] == 'd':
		return string(entry[1:]), true, nil
	case len(entry) >= 10 && entry[0] == 't':
		return parseTimerKey(entry).id, true, nil
	}
	return "", false, fmt.Errorf("not a silence state entry: %w", errCorrupt)
}

// MergePartition merges the ingestion clocks: the latest.
func (SilenceResharder) MergePartition(key []byte, vals [][]byte) ([]byte, error) {
	if !bytes.Equal(key, silenceClockKey) {
		return nil, fmt.Errorf("not a silence clock entry: %w", errCorrupt)
	}
	var (
		latest int64
		any    bool
	)
	for _, v := range vals {
		if v == nil {
			continue
		}
		c, n := binary.Varint(v)
		if n <= 0 {
			return nil, fmt.Errorf("silence clock entry: %w", errCorrupt)
		}
		if !any || c > latest {
			latest, any = c, true
		}
	}
	if !any {
		return nil, nil
	}
	return binary.AppendVarint(nil, latest), nil
}
