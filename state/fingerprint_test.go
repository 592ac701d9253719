package state

import "testing"

// DropStage removes every partition and Kinesis shard of one stage and
// nothing of a stage whose name merely starts the same; the fingerprint set
// in the same batch survives the drop.
func TestDropStageKeepsFingerprintAndOtherStages(t *testing.T) {
	s, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := s.NewBatch()
	for _, st := range []string{"a", "ab", "a/shardId-000"} {
		for p := range int32(2) {
			b.Set(st, p, []byte("k"), []byte("v"))
			b.SetMeta(st, p, Meta{ChangelogOffset: 5, InputOffset: 7})
		}
	}
	b.SetFingerprint("a", []byte("old"))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if fp, ok, err := s.Fingerprint("a"); err != nil || !ok || string(fp) != "old" {
		t.Fatalf("Fingerprint(a) = %q, %v, %v", fp, ok, err)
	}
	b = s.NewBatch()
	b.DropStage("a")
	b.SetFingerprint("a", []byte("new"))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		stage string
		want  int
	}{{"a", 0}, {"a/shardId-000", 0}, {"ab", 1}} {
		for p := range int32(2) {
			n, err := s.Count(tc.stage, p)
			if err != nil {
				t.Fatal(err)
			}
			_, found, _ := s.Load(tc.stage, p, func(_, _ []byte) error { return nil })
			if n != tc.want || found != (tc.want > 0) {
				t.Errorf("%s/%d after DropStage(a): %d entries, meta %v; want %d", tc.stage, p, n, found, tc.want)
			}
		}
	}
	if fp, ok, err := s.Fingerprint("a"); err != nil || !ok || string(fp) != "new" {
		t.Errorf("Fingerprint(a) after drop = %q, %v, %v; want new", fp, ok, err)
	}
	if _, ok, _ := s.Fingerprint("ab"); ok {
		t.Error("stage ab has a fingerprint it never got")
	}
}
