package serve

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// revised returns c as revision rev, with values that differ from c's.
func revised(c candle.Candle, rev uint32) candle.Candle {
	c.Rev = rev
	c.Trades += int64(rev)
	c.Volume = c.Volume.AddDecimal(decimal.FromInt(int64(rev)))
	c.Gap = false
	return c
}

// TestMarksRevisions: after a window's final, a client's marks admit only
// a final with a higher rev (a revision), however many newer windows have
// opened since; never an older or equal rev, never a live state.
func TestMarksRevisions(t *testing.T) {
	cs := series("BTC/USDT", tf(t, "1m"), 0, 12, 3)
	live := func(i int) Update { return Update{Candle: cs[i]} }
	final := func(i int, rev uint32) Update { return Update{Candle: revised(cs[i], rev), Final: true} }
	var ms marks
	for n, tc := range []struct {
		u    Update
		want bool
	}{
		{live(0), true},
		{live(1), true},      // the next window opens
		{final(0, 0), true},  // the final of the older window
		{final(0, 1), true},  // its revision
		{final(0, 0), false}, // an older rev after it
		{final(0, 1), false}, // the same rev again
		{live(0), false},     // a live state after the final
		{live(2), true},
		{live(3), true},
		{live(4), true},
		{live(5), true},      // window 0 leaves the recent windows…
		{final(0, 1), false}, // …but its rev is remembered
		{final(0, 0), false},
		{final(0, 3), true}, // a revision of an old window goes out
		{final(0, 2), false},
		{final(1, 0), false}, // window 1 (never final here) is older than the recent ones
		{final(1, 1), true},  // but its revision goes out
		{final(1, 1), false},
		{final(5, 2), true}, // a recent window's first final may be a revision
		{final(5, 0), false},
	} {
		if _, got := ms.admit(&tc.u); got != tc.want {
			t.Fatalf("step %d (window %d, rev %d, final %v): admitted %v", n, tc.u.Candle.OpenTime/60_000, tc.u.Candle.Rev, tc.u.Final, got)
		}
	}
	// Revisions of many old windows: at most revisedWindows remembered.
	for i := 0; i < 2*revisedWindows; i++ {
		u := Update{Candle: revised(cs[0], 1), Final: true}
		u.Candle.OpenTime = -int64(i+1) * 60_000
		ms.admit(&u)
	}
	if len(ms.recent) > markWindows || len(ms.revised) > revisedWindows {
		t.Fatalf("%d recent and %d revised marks kept", len(ms.recent), len(ms.revised))
	}
}

// TestDerivedRevision: a revision of a sub-candle whose final a derived
// window has folded in already rebuilds the window: its bar equals
// combine of the sub-candles with the revision, is final, and has a
// higher rev; an older rev of the sub-candle changes nothing.
func TestDerivedRevision(t *testing.T) {
	m1, m3 := tf(t, "1m"), tf(t, "3m")
	cs := series("BTC/USDT", m1, 0, 6, 7)
	d := &derivedSeries{tf: m3, seeded: true}
	for _, c := range cs {
		d.add(Update{Candle: c, Final: true})
	}
	r1 := revised(cs[1], 1)
	got, ok := d.add(Update{Candle: r1, Final: true})
	want := combine([]candle.Candle{cs[0], r1, cs[2]}, m3)[0]
	if !ok || !got.Final || !got.Candle.Equal(&want) || got.Candle.Rev != 1 {
		t.Fatalf("after a revision of a folded sub-candle: %+v (final %v, ok %v), want %+v rev 1", got.Candle, got.Final, ok, want)
	}
	if _, ok := d.add(Update{Candle: cs[1], Final: true}); ok {
		t.Fatal("an older rev of a sub-candle changed the derived window")
	}
	if _, ok := d.add(Update{Candle: r1, Final: true}); ok {
		t.Fatal("the same rev of a sub-candle again changed the derived window")
	}
}

// TestCandlesNewestRev: /v1/candles answers the newest rev of a window
// wherever it is: hot and cold both hold it (near the split, within the
// revision horizon) and either has the higher rev, or the live store holds
// a revision of the newest window newer than the stored final. "rev" is in
// the JSON when above 0.
func TestCandlesNewestRev(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 30, 0, time.UTC)
	m1 := tf(t, "1m")
	horizon := 100 * time.Minute
	b := now.Add(-horizon).UnixMilli()
	cs := series("BTC/USDT", m1, b-10*60_000, 110, 5) // 10 before the split, 100 after
	hot, cold, live := NewMemory(1<<20), NewMemory(1<<20), NewMemory(10)
	for _, c := range cs {
		if c.OpenTime < b {
			cold.Add(c)
		}
		if c.OpenTime >= b-10*60_000 {
			hot.Add(c)
		}
	}
	hot.Add(revised(cs[3], 1))  // the hot store got the revision first
	cold.Add(revised(cs[5], 2)) // the cold store did
	hot.Add(revised(cs[5], 1))
	hot.Add(revised(cs[5], 0)) // an older rev after a newer one: dropped by the store
	last := len(cs) - 1
	live.Active(revised(cs[last], 4)) // the live hash holds a revision of the newest window
	hot.Add(revised(cs[last], 3))
	cfg := defaults(t)
	cfg.HotHorizon = horizon
	s, err := New(Options{Config: cfg, Timeframes: map[string]candle.Timeframe{"1m": m1}, Hot: hot, Cold: cold, Live: live,
		ReviseWithin: time.Hour, Now: func() time.Time { return now }, Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	base := start(t, s)
	want := map[int]candle.Candle{3: revised(cs[3], 1), 5: revised(cs[5], 2), last: revised(cs[last], 4), 4: cs[4]}
	code, body := get(t, fmt.Sprintf("%s/v1/candles?symbol=%s&timeframe=1m&start=%d&end=%d&limit=1000",
		base, url.QueryEscape("BTC/USDT"), cs[0].OpenTime, cs[last].CloseTime))
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	p := decode(t, body)
	if len(p.Candles) != len(cs) {
		t.Fatalf("%d candles, want %d", len(p.Candles), len(cs))
	}
	for i, w := range want {
		if got, exp := string(p.Candles[i]), string(AppendCandle(nil, &w, true)); got != exp {
			t.Fatalf("window %d:\n got %s\nwant %s", i, got, exp)
		}
	}
}

// TestStreamRevisionOfClosedWindow, through the valkey sink and a real
// redis-server: the 12:29 final (rev 0) arrives after 12:30 opened, then
// its revision (rev 1) after 12:31 opened: the client gets both, rev 1
// with "rev":1. A stale rev 0 (or rev 1 again) published after it is not
// delivered. A revision of a window that left the client's last windows
// still goes out, an older one after it does not, and /v1/candles answers
// the newest rev.
func TestStreamRevisionOfClosedWindow(t *testing.T) {
	m1 := tf(t, "1m")
	t1229 := time.Date(2026, 11, 27, 12, 29, 0, 0, time.UTC)
	v := newValkeyStream(t, map[string]candle.Timeframe{"1m": m1}, t1229.Add(10*time.Minute))
	cs := series("BTC/USDT", m1, t1229.UnixMilli(), 8, 4)
	for i := range cs {
		cs[i].Trades, cs[i].Gap = 3, false
	}
	v.live(t, cs[0])
	c := v.subscribe(t, "BTC/USDT", "1m", "1m")
	if m := recv(t, c); m.OpenTime != cs[0].OpenTime || m.Final {
		t.Fatalf("snapshot: %s", m.raw)
	}
	expect := func(what string, u Update) {
		t.Helper()
		if m, want := recv(t, c), string(updateJSON(nil, u)); m.raw != want {
			t.Fatalf("%s:\n got %s\nwant %s", what, m.raw, want)
		}
	}
	v.live(t, cs[1])
	v.final(t, cs[0])
	expect("12:30 opens", Update{Candle: cs[1]})
	expect("the 12:29 final", Update{Candle: cs[0], Final: true})
	v.live(t, cs[2])
	expect("12:31 opens", Update{Candle: cs[2]})
	r1 := revised(cs[0], 1)
	v.final(t, r1)
	expect("the 12:29 revision", Update{Candle: r1, Final: true})

	// Stale finals published straight to the channel (a redelivery, or
	// another sink): the stream drops them itself.
	publish := func(u Update) {
		t.Helper()
		ch := "pub:candle:1m:BTC/USDT"
		if err := v.raw.Do(context.Background(), v.raw.B().Publish().Channel(ch).Message(string(updateJSON(nil, u))).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	publish(Update{Candle: cs[0], Final: true})
	publish(Update{Candle: r1, Final: true})
	next := cs[2]
	next.Trades++
	v.live(t, next)
	expect("12:31 moves on (the stale finals were dropped)", Update{Candle: next})

	// 12:29 leaves the client's last windows; its next revision still
	// goes out, and an older one after it does not.
	for _, w := range cs[3:7] {
		v.live(t, w)
		expect("the next window", Update{Candle: w})
	}
	r2 := revised(cs[0], 2)
	v.final(t, r2)
	expect("a revision of an old window", Update{Candle: r2, Final: true})
	publish(Update{Candle: r1, Final: true})
	v.live(t, cs[7])
	expect("the next window (rev 1 after rev 2 dropped)", Update{Candle: cs[7]})

	v.hot.Add(r1) // an older rev reaching the store late: dropped
	code, body := get(t, fmt.Sprintf("%s/v1/candles?symbol=%s&timeframe=1m&start=%d&end=%d",
		v.base, url.QueryEscape("BTC/USDT"), cs[0].OpenTime, cs[0].CloseTime))
	if want := string(AppendCandle(nil, &r2, true)); code != 200 || len(decode(t, body).Candles) != 1 || string(decode(t, body).Candles[0]) != want {
		t.Fatalf("/v1/candles of 12:29: %d %s, want %s", code, body, want)
	}
}
