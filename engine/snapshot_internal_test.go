package engine

import "testing"

// The metadata a snapshot's offset commit carries reads back as the same
// position; anything else — kgo's default (the member id), another tool's
// metadata, a damaged string — names no snapshot, so the restore reads the
// changelog from its start.
func TestSnapshotMetadata(t *testing.T) {
	ref := snapRef{offset: 21639, token: "a.1764115200000000000.3"}
	got, ok := parseSnapMeta(ref.metadata())
	if !ok || got != ref {
		t.Fatalf("parseSnapMeta(%q) = %+v, %v; want %+v", ref.metadata(), got, ok, ref)
	}
	for _, md := range []string{
		"", "kandle-b-097379e47317b1c731e2af63c34a34ce", "kandle.snapshot/1 ", "kandle.snapshot/1 12",
		"kandle.snapshot/1 12 ", "kandle.snapshot/1 x tok", "kandle.snapshot/1 -3 tok", "kandle.snapshot/2 12 tok",
	} {
		if r, ok := parseSnapMeta(md); ok {
			t.Errorf("parseSnapMeta(%q) = %+v: names a snapshot", md, r)
		}
	}
}

// A partition snapshots once the changelog records since its last snapshot
// exceed twice its live entries, and a small state is not copied on every
// commit.
func TestSnapshotDue(t *testing.T) {
	for _, tc := range []struct {
		since   int64
		keys    int
		changes int
		want    bool
	}{
		{0, 0, 0, false},
		{1990, 10, 10, false}, // the floor: 2 × 1000
		{1991, 10, 10, true},
		{399_000, 200_000, 1000, false}, // 2 × 200 k
		{399_000, 200_000, 1001, true},
	} {
		u := &unit{sinceSnap: tc.since, liveKeys: tc.keys}
		if got := u.snapshotDue(tc.changes); got != tc.want {
			t.Errorf("since %d, keys %d, changes %d: due %v, want %v", tc.since, tc.keys, tc.changes, got, tc.want)
		}
	}
}
