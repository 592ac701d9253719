package processors

import (
	"encoding/binary"
	"fmt"
)

// Resharding (Kinesis split and merge) hands keys from parent shards to a
// child. The engine copies the parents' state entries whose key the child
// now owns and merges their partition entries; these two functions let it do
// that without knowing the entry encoding.

// EntryKey returns the record key a state entry of an Aggregator belongs to.
// ok is false for the partition entry, which belongs to no key.
func EntryKey(entry []byte) (key string, ok bool, err error) {
	if len(entry) == 0 {
		return "", false, fmt.Errorf("state entry: %w", errCorrupt)
	}
	switch entry[0] {
	case entryPartition:
		return "", false, nil
	case entryKey:
		return string(entry[1:]), true, nil
	case entryIDs:
		r := reader{b: entry[1:]}
		name := r.bytes(r.uvarint())
		if r.err != nil {
			return "", false, fmt.Errorf("state entry %q: %w", entry, r.err)
		}
		return string(name), true, nil
	}
	return "", false, fmt.Errorf("state entry %q: unknown kind: %w", entry, errCorrupt)
}

// PartitionEntry is the key of the partition entry.
var PartitionEntry = []byte{entryPartition}

// MergePartition returns the partition entry of a shard that continues the
// given parents: the latest max event time, the latest record wall time and
// the highest watermark, so the child's watermark never goes back. Nil
// values are skipped; the result is nil when all are. The watermark is kept
// only when every parent with a max event time stored one (else the child
// derives it from the max event time, as for state written before
// watermarks were stored).
func MergePartition(vals ...[]byte) ([]byte, error) {
	var (
		hasMax, hasWall bool
		maxTS, wall     int64
		any             bool
		wm              int64
		wmAll, hasWM    = true, false
	)
	for _, v := range vals {
		if v == nil {
			continue
		}
		if len(v) < 2 || v[0] != stateVersion {
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
	}
	return out, nil
}
