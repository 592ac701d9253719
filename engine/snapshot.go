package engine

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Changelog snapshots bound what a new owner with an empty disk reads (see
// the package doc, "Changelog snapshots"). A snapshot of one partition is,
// in one transaction and in this order on the changelog partition: a marker
// record (key "s", value a token unique to the snapshot), every live state
// entry not changed in the transaction, the transaction's changes, and the
// progress record ("o"). The marker's offset and token travel as the
// metadata of the input partition's transactional offset commit, so they
// are committed exactly when the snapshot is.

// keySnapshot is the changelog key of a snapshot's first record.
var keySnapshot = []byte("s")

const (
	// snapshotRatio: a partition snapshots once the changelog records it
	// wrote since its last snapshot exceed snapshotRatio × its live keys,
	// so a snapshot costs at most 1/snapshotRatio more changelog records
	// and a restore reads at most (1+snapshotRatio) × the live state.
	snapshotRatio = 2
	// snapshotFloor is the least key count the ratio is taken of: a tiny
	// state is not copied on every commit.
	snapshotFloor = 1000
	// snapshotMetaPrefix starts the offset-commit metadata naming a snapshot.
	snapshotMetaPrefix = "kandle.snapshot/1 "
)

// snapRef is where a snapshot starts: the offset of its marker on the
// changelog partition and the marker's value.
type snapRef struct {
	offset int64
	token  string
}

func (r snapRef) valid() bool { return r.token != "" && r.offset >= 0 }

// metadata is the offset-commit metadata that names r.
func (r snapRef) metadata() string {
	return snapshotMetaPrefix + strconv.FormatInt(r.offset, 10) + " " + r.token
}

// parseSnapMeta reads offset-commit metadata written by metadata (its
// first line: the lines after it name the snapshots of fused processors,
// fusedSnapMeta); anything else (kgo's default, the member id; an older
// kandle; another tool's) names no snapshot.
func parseSnapMeta(s string) (snapRef, bool) {
	s, _, _ = strings.Cut(s, "\n")
	rest, ok := strings.CutPrefix(s, snapshotMetaPrefix)
	if !ok {
		return snapRef{}, false
	}
	off, token, ok := strings.Cut(rest, " ")
	if !ok || token == "" {
		return snapRef{}, false
	}
	o, err := strconv.ParseInt(off, 10, 64)
	if err != nil || o < 0 {
		return snapRef{}, false
	}
	return snapRef{offset: o, token: token}, true
}

// fusedSnapPrefix starts a line of offset-commit metadata naming the
// snapshot of a processor fused into the stage: the prefix, the
// processor's name, the marker's offset and its token.
const fusedSnapPrefix = "fused "

// fusedSnapLine is the metadata line that names r as the snapshot of the
// fused processor name.
func fusedSnapLine(name string, r snapRef) string {
	return "\n" + fusedSnapPrefix + name + " " + strconv.FormatInt(r.offset, 10) + " " + r.token
}

// parseFusedSnapMeta reads the snapshot of the fused processor name from
// offset-commit metadata (ok false: none named).
func parseFusedSnapMeta(s, name string) (snapRef, bool) {
	lines := strings.Split(s, "\n")
	for _, l := range lines[min(1, len(lines)):] {
		rest, ok := strings.CutPrefix(l, fusedSnapPrefix+name+" ")
		if !ok {
			continue
		}
		return parseSnapMeta(snapshotMetaPrefix + rest)
	}
	return snapRef{}, false
}

// pendingSnap is a snapshot produced in the open transaction.
type pendingSnap struct {
	ref     snapRef // offset known once the marker's produce returned
	placed  bool    // the marker's offset is known
	written bool    // its metadata went into an offset commit of the transaction
	keys    int     // live entries it holds
	records int     // changelog records it wrote
}

// scanUnit calls fn with every committed entry of unit u (its Pebble
// range: the state of its last commit) whose key skip does not hold.
func (e *Engine) scanUnit(u unitRef, skip map[string]bool, fn func(k, v []byte)) error {
	return e.store.Scan(u.ns, u.part, nil, nil, func(k, v []byte) bool {
		if !skip[string(k)] && !(u.seqInPebble && string(k) == pebbleProgressKey) {
			fn(k, v)
		}
		return true
	})
}

// snapMetadata is the metadata partition p's offset commit in the open
// transaction carries: the snapshot of the transaction, else the last
// committed one; then a line for each fused processor's (fusedSnapLine).
// ok false: none known (kgo's default metadata stays, and a new owner
// reads the changelog from its start).
func (s *liveStage) snapMetadata(p int32) (string, bool) {
	ps, ok := s.parts[p]
	if !ok {
		return "", false
	}
	of := func(u *unit) (snapRef, bool) {
		if ref, ok := s.txn.snapshotOf(u, true); ok {
			return ref, true
		}
		return u.snap, u.snap.valid()
	}
	md, found := snapRef{offset: -1, token: "-"}.metadata(), false // a first line that names no snapshot
	if ref, ok := of(&ps.unit); ok {
		md, found = ref.metadata(), true
	}
	for _, fu := range ps.chain {
		if ref, ok := of(&fu.unit); ok {
			md, found = md+fusedSnapLine(fu.st.spec.Name, ref), true
		}
	}
	return md, found
}

// withSnapMetadata makes the offset commit kgo sends when ending the
// transaction carry each partition's snapshot position (kgo calls fn just
// before the request, inside End).
func (s *liveStage) withSnapMetadata(ctx context.Context) context.Context {
	return kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		for i := range req.Topics {
			t := &req.Topics[i]
			if t.Topic != s.spec.InputTopic && (t.TopicID == [16]byte{} || t.TopicID != s.inputTopicID) {
				continue
			}
			for j := range t.Partitions {
				if md, ok := s.snapMetadata(t.Partitions[j].Partition); ok {
					t.Partitions[j].Metadata = &md
				}
			}
		}
		return nil
	})
}

// committedSnapshot is the snapshot position committed with the group's
// offset of input partition p, of the stage's processor (fused "") or of
// the processor fused into it named fused (ok false: none, or it cannot be
// read now).
func (s *liveStage) committedSnapshot(ctx context.Context, p int32, fused string) (snapRef, bool) {
	offs, err := s.admin.FetchOffsetsForTopics(ctx, s.group, s.spec.InputTopic)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("cannot read the committed snapshot position; restoring from the changelog's start", "partition", p, "err", err)
		}
		return snapRef{}, false
	}
	o, ok := offs.Lookup(s.spec.InputTopic, p)
	if !ok || o.Err != nil {
		return snapRef{}, false
	}
	if fused != "" {
		return parseFusedSnapMeta(o.Metadata, fused)
	}
	return parseSnapMeta(o.Metadata)
}

// errNotSnapshot: the record at a snapshot's recorded offset is not its
// marker (the changelog was recreated, or compaction removed the marker
// because a later snapshot wrote another).
var errNotSnapshot = errors.New("the changelog holds no snapshot marker at the recorded offset")

// checkMarker returns a changelog read callback check: the first record
// must be the marker of ref, whose key is key.
func checkMarker(ref snapRef, key []byte) func(r *kgo.Record) error {
	first := true
	return func(r *kgo.Record) error {
		if !first {
			return nil
		}
		first = false
		if r.Offset != ref.offset || !bytes.Equal(r.Key, key) || string(r.Value) != ref.token {
			return errNotSnapshot
		}
		return nil
	}
}
