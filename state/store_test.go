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
