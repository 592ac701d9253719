package state

import (
	"fmt"
	"testing"
)

func TestBatchIsAtomicAndScoped(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := s.NewBatch()
	b.Set("1m", 0, []byte("BTC"), []byte("a"))
	b.Set("1m", 0, []byte("ETH"), []byte("b"))
	b.Set("1m", 1, []byte("BTC"), []byte("other partition"))
	b.Set("5m", 0, []byte("BTC"), []byte("other stage"))
	b.SetMeta("1m", 0, Meta{ChangelogOffset: 7, InputOffset: 42})
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	// Not committed: must never become visible.
	nb := s.NewBatch()
	nb.Set("1m", 0, []byte("SOL"), []byte("x"))
	s.Close()

	s, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []string
	m, ok, err := s.Load("1m", 0, func(k, v []byte) error { got = append(got, fmt.Sprintf("%s=%s", k, v)); return nil })
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if fmt.Sprint(got) != "[BTC=a ETH=b]" || m != (Meta{7, 42}) {
		t.Fatalf("got %v %+v", got, m)
	}
	d := s.NewBatch()
	d.Set("1m", 0, []byte("BTC"), nil)
	d.Drop("1m", 1)
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Count("1m", 0); n != 1 {
		t.Fatalf("after delete: %d entries", n)
	}
	if _, ok, _ := s.Load("1m", 1, func(_, _ []byte) error { return nil }); ok {
		t.Fatal("dropped partition still has meta")
	}
	if n, _ := s.Count("5m", 0); n != 1 {
		t.Fatal("drop leaked into another stage")
	}
}

func TestUnknownPartitionHasNoState(t *testing.T) {
	s, err := Open("", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok, err := s.Load("x", 3, func(_, _ []byte) error { return nil }); ok || err != nil {
		t.Fatal(ok, err)
	}
}

// TestGetAndScanAreScopedAndOrdered: Get and Scan see only their (stage,
// partition), Scan walks [from, to) in key order and stops when told.
func TestGetAndScanAreScopedAndOrdered(t *testing.T) {
	s, err := Open("", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := s.NewBatch()
	for _, k := range []string{"t3", "t1", "d1", "t2", "u"} {
		b.Set("sil", 0, []byte(k), []byte("v"+k))
	}
	b.Set("sil", 1, []byte("t0"), []byte("other partition"))
	b.Set("sil0", 0, []byte("t0"), []byte("other stage"))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := s.Get("sil", 0, []byte("d1")); err != nil || !ok || string(v) != "vd1" {
		t.Fatalf("Get d1 = %q %v %v", v, ok, err)
	}
	if _, ok, err := s.Get("sil", 0, []byte("t0")); err != nil || ok {
		t.Fatalf("Get t0 found another partition's entry (%v)", err)
	}
	var got []string
	if err := s.Scan("sil", 0, []byte("t"), []byte("u"), func(k, v []byte) bool { got = append(got, string(k)); return true }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[t1 t2 t3]" {
		t.Fatalf("Scan [t, u) = %v, want [t1 t2 t3]", got)
	}
	got = nil
	_ = s.Scan("sil", 0, []byte("t2"), nil, func(k, v []byte) bool { got = append(got, string(k)); return len(got) < 2 })
	if fmt.Sprint(got) != "[t2 t3]" {
		t.Fatalf("Scan from t2, stop after 2 = %v, want [t2 t3]", got)
	}
}
