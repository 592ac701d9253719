package valkey

import (
	"context"
	"log/slog"
	"testing"
)

// TestRevisionsNeverGoBack: rev 2 of a window then rev 1 (in one flush, and
// again after the hash moved on to the next window): rev 2 stays in the
// hash, the reader returns it, and a subscriber sees the window's revs go
// up only (0, 2, 3), never rev 1 after rev 2.
func TestRevisionsNeverGoBack(t *testing.T) {
	srv := startRedis(t)
	raw := reader(t, srv.Addr)
	s := newSink(t, srv.Addr, nil)
	sub := subscribe(t, raw, "pub:candle:1m:REV")
	ctx := context.Background()
	rd, err := NewReader(ctx, s.cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	rev := func(c candle1, r uint32) candle1 { c.Rev = r; return c }
	write := func(cs ...candle1) {
		t.Helper()
		if err := s.Write(ctx, cs); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatalf("Flush: %v (a stale revision is not an error)", err)
		}
	}
	r0 := mk("REV", 10, "1", "2", "1", "2", "1", "2", 1)
	r1 := rev(mk("REV", 10, "1", "3", "1", "3", "2", "5", 2), 1)
	r2 := rev(mk("REV", 10, "1", "4", "1", "4", "3", "9", 3), 2)
	r3 := rev(mk("REV", 10, "1", "5", "1", "5", "4", "14", 4), 3)

	write(r0)
	write(r2, r1) // rev 2 then rev 1 of the same window, one script call
	wantHash(t, hgetall(t, raw, "candle:active:1m:REV"), r2)
	got, ok, err := rd.Active(ctx, "REV", "1m")
	if err != nil || !ok || !got.Equal(&r2) {
		t.Fatalf("Reader.Active = %+v %v %v, want rev 2 %+v", got, ok, err, r2)
	}
	write(r1) // alone, later
	wantHash(t, hgetall(t, raw, "candle:active:1m:REV"), r2)

	// The next window opens: the hash moves on, yet the window's revisions
	// still only go up on the channel.
	next := mk("REV", 11, "5", "5", "5", "5", "1", "5", 1)
	s.Active(next)
	if err := s.FlushActive(ctx); err != nil {
		t.Fatal(err)
	}
	write(r3)     // a revision of a closed, older window: published
	write(r1, r0) // older revisions redelivered: neither stored nor published
	end := mk("REV", 12, "6", "6", "6", "6", "1", "6", 1)
	write(end)
	wantHash(t, hgetall(t, raw, "candle:active:1m:REV"), end)

	var revs []uint32
	for {
		m := recv(t, sub)
		if m.OpenTime == end.OpenTime {
			break
		}
		if m.OpenTime != r0.OpenTime {
			continue
		}
		if !m.Final {
			t.Fatalf("revision %d published without final:true", m.Rev)
		}
		revs = append(revs, m.Rev)
		if want := []candle1{r0, r2, r3}[len(revs)-1]; !m.Candle.Equal(&want) {
			t.Fatalf("message %d of window 10: %+v, want %+v (revs so far %v)", len(revs), m.Candle, want, revs)
		}
		if len(revs) == 3 {
			break
		}
	}
	if len(revs) != 3 {
		t.Fatalf("window 10 published revs %v, want [0 2 3]", revs)
	}
	for {
		if m := recv(t, sub); m.OpenTime == end.OpenTime {
			break
		} else if m.OpenTime == r0.OpenTime {
			t.Fatalf("stale rev %d of window 10 published after rev 3", m.Rev)
		}
	}
	if n := counter(s.m.staleRevs); n != 4 {
		t.Fatalf("stale_revisions_total = %v, want 4 (rev 1 three times, rev 0 once)", n)
	}
}
