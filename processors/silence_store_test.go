package processors

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// engineStore plays the engine's Pebble partition: it holds what commit
// wrote from Changes, and counts the entries Scan visited.
type engineStore struct {
	m       *memStore
	visited int
}

func newEngineStore() *engineStore { return &engineStore{m: newMemStore()} }

func (e *engineStore) Get(k []byte) ([]byte, bool, error) {
	v, ok, err := e.m.Get(k)
	return bytes.Clone(v), ok, err
}

func (e *engineStore) Scan(from, to []byte, fn func(k, v []byte) bool) error {
	return e.m.Scan(from, to, func(k, v []byte) bool { e.visited++; return fn(k, v) })
}

// commit writes s's changes into the store, as the engine does after a
// committed transaction.
func (e *engineStore) commit(s *Silence) {
	s.Changes(func(k, v []byte) { e.m.set(string(k), bytes.Clone(v)) })
}

func (e *engineStore) count(prefix byte) int {
	n := 0
	_ = e.m.Scan([]byte{prefix}, []byte{prefix + 1}, func(_, _ []byte) bool { n++; return true })
	return n
}

func storeSilence(t *testing.T, clock Clock, levels []SilenceLevel, st StateStore) *Silence {
	t.Helper()
	s, err := NewSilence(SilenceConfig{Levels: levels, Key: "device", Time: "ts", Carry: []string{"owner"},
		Retire: "retired", IdleTimeout: shippedIdle, Live: true}, clock)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.UseStore(st); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSilenceStateInStore: with an engine store, a silence processor keeps
// in memory only the devices changed since the last commit; every device
// and its one pending timer are entries in the store; firing visits only
// the timers that are due (not every device); and a processor restarted on
// the store fires exactly what an uninterrupted in-memory one fires.
func TestSilenceStateInStore(t *testing.T) {
	const devices, commitEvery = 10_000, 500
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &testClock{t: t0}
	st := newEngineStore()
	s := storeSilence(t, clock, shippedLevels, st)
	ref := newTestSilence(t, clock) // no engine store: state in memory
	var out, refOut Output
	for d := range devices {
		clock.t = t0.Add(time.Duration(d) * time.Second)
		rec := reading(fmt.Sprintf("dev-%05d", d), clock.t, "")
		s.Process(rec, &out)
		ref.Process(rec, &refOut)
		if (d+1)%commitEvery == 0 {
			st.commit(s)
			if len(s.devs) != 0 || len(s.dirty) != 0 {
				t.Fatalf("after a commit %d devices are still in memory, want 0", len(s.devs))
			}
		}
	}
	st.commit(s)
	if n, m := st.count('d'), st.count('t'); n != devices || m != devices {
		t.Fatalf("store holds %d devices and %d timers, want %d each (one pending timer per device)", n, m, devices)
	}

	// 10 unreachable timers come due (devices 0..9, one second apart).
	clock.t = t0.Add(3*day + 9*time.Second + shippedIdle)
	s.lastWall = clock.t.Add(-shippedIdle).UnixMilli()
	ref.lastWall = s.lastWall
	st.visited = 0
	s.AdvanceTo(t0.Add(3*day+9*time.Second).UnixMilli(), &out)
	ref.AdvanceTo(t0.Add(3*day+9*time.Second).UnixMilli(), &refOut)
	if len(out.Events) != 10 {
		t.Fatalf("%d events fired, want 10", len(out.Events))
	}
	if st.visited > 10+1 {
		t.Fatalf("firing 10 timers among %d devices visited %d store entries, want at most 11 (the due ones and the next)", devices, st.visited)
	}
	st.commit(s)

	// Restart on the store; fire everything that is left, all levels.
	s2 := storeSilence(t, clock, shippedLevels, st)
	end := t0.Add(11 * day).UnixMilli()
	ref.AdvanceTo(end, &refOut)
	// After a downtime, all 30,000 timers are due: each step (a record or
	// an idle tick, then a commit) fires at most silenceFireStep of them,
	// so the devices held in memory until the commit stay bounded.
	for steps := 0; ; steps++ {
		n := len(out.Events)
		s2.AdvanceTo(end, &out)
		s2.AdvanceTo(end, &out) // a second call before the commit fires no more
		if len(s2.devs) > silenceFireStep || len(out.Events)-n > silenceFireStep {
			t.Fatalf("one step fired %d timers and holds %d devices, want at most %d", len(out.Events)-n, len(s2.devs), silenceFireStep)
		}
		st.commit(s2)
		if len(out.Events) == n {
			break
		}
		if steps > 3*devices/silenceFireStep+2 {
			t.Fatalf("still firing after %d steps", steps)
		}
	}
	if len(out.Events) != 3*devices {
		t.Fatalf("%d events in all, want %d (three levels per device, each once)", len(out.Events), 3*devices)
	}
	if !slices.EqualFunc(out.Events, refOut.Events, func(a, b Event) bool { return a.Key == b.Key && bytes.Equal(a.Value, b.Value) }) {
		t.Fatal("the store-backed processor, restarted, fired other events than the in-memory one")
	}
	if n := st.count('t'); n != 0 {
		t.Fatalf("%d timers left after every level fired, want 0", n)
	}
}

// TestSilenceTombstone: a record with a nil value keyed by a device
// retires it: its timer and state are deleted, no event is emitted.
func TestSilenceTombstone(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &testClock{t: t0}
	st := newEngineStore()
	s := storeSilence(t, clock, shippedLevels, st)
	var out Output
	s.Process(reading("d1", t0, ""), &out)
	s.Process(reading("d2", t0, ""), &out)
	st.commit(s)
	s.Process(Record{Key: []byte("d1"), Value: nil, Timestamp: t0.Add(time.Minute).UnixMilli()}, &out)
	st.commit(s)
	if len(out.Events) != 0 || len(out.Rejected) != 0 {
		t.Fatalf("a tombstone produced %d events, %d rejections; want none", len(out.Events), len(out.Rejected))
	}
	if _, ok, _ := st.Get([]byte("dd1")); ok {
		t.Fatal("the retired device's state is still in the store")
	}
	if n := st.count('t'); n != 1 {
		t.Fatalf("%d timers in the store, want 1 (d2's)", n)
	}
	s.AdvanceTo(t0.Add(11*day).UnixMilli(), &out)
	for _, e := range out.Events {
		if e.Key == "d1" {
			t.Fatalf("a retired device fired %s", e.Value)
		}
	}
	if len(out.Events) != 3 {
		t.Fatalf("d2 fired %d events, want 3", len(out.Events))
	}
	// A tombstone of an unknown device, or one without a key, is harmless.
	out.Reset()
	s.Process(Record{Key: []byte("nobody")}, &out)
	s.Process(Record{}, &out)
	if len(out.Events) != 0 || len(out.Rejected) != 1 || out.Rejected[0].Reason != ReasonMalformedJSON {
		t.Fatalf("unknown-device tombstone and keyless empty record: events %d, rejected %+v; want none and one malformed_json", len(out.Events), out.Rejected)
	}
}

// TestSilenceLengthenedDelayAfterRestart: a pending timer armed with an
// older, shorter delay never fires early: it waits for the current delay.
func TestSilenceLengthenedDelayAfterRestart(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &testClock{t: t0}
	st := newEngineStore()
	s := storeSilence(t, clock, shippedLevels, st)
	var out Output
	s.Process(reading("d1", t0, ""), &out)
	st.commit(s)
	longer := slices.Clone(shippedLevels)
	longer[0].After = 4 * day
	s2 := storeSilence(t, clock, longer, st)
	s2.AdvanceTo(t0.Add(3*day+time.Minute).UnixMilli(), &out)
	if len(out.Events) != 0 {
		t.Fatalf("fired %s at 3 days; the delay is now 4 days", out.Events[0].Value)
	}
	s2.AdvanceTo(t0.Add(4*day).UnixMilli(), &out)
	if evs := decodeEvents(t, &out); len(evs) != 1 || evs[0]["event"] != "unreachable" || evs[0]["due_at"] != ms(t0.Add(4*day)) {
		t.Fatalf("at 4 days got %v, want unreachable due at %s", evs, ms(t0.Add(4*day)))
	}
}

type failingStore struct{}

func (failingStore) Get([]byte) ([]byte, bool, error) { return nil, false, errors.New("disk gone") }
func (failingStore) Scan([]byte, []byte, func(k, v []byte) bool) error {
	return errors.New("disk gone")
}

// TestSilenceStoreFailure: a failed store read is reported by Err, so the
// engine never commits what was computed without it.
func TestSilenceStoreFailure(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := NewSilence(SilenceConfig{Levels: shippedLevels, Key: "device", Time: "ts"}, FixedClock{T: t0})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.UseStore(failingStore{}); err == nil {
		t.Fatal("UseStore on a failing store returned no error")
	}
	s.store, s.mem = failingStore{}, nil
	var out Output
	s.Process(reading("d1", t0, ""), &out)
	if s.Err() == nil {
		t.Fatal("a failed store read was not reported by Err")
	}
}

// TestSilenceStepsFireInOrder: with a small step, a backlog of due timers
// (every level of every device, after a downtime) fires over many steps
// exactly as one uninterrupted in-memory pass fires it: same events, same
// order, none lost when a step ends on the last timer it read.
func TestSilenceStepsFireInOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, step := range []int{1, 2, 7, 100} {
		clock := &testClock{t: t0}
		st := newEngineStore()
		s := storeSilence(t, clock, shippedLevels, st)
		s.maxFire = step
		ref := newTestSilence(t, clock)
		var out, refOut Output
		for d := range 300 {
			clock.t = t0.Add(time.Duration(d%17) * time.Minute) // ties in due time too
			rec := reading(fmt.Sprintf("dev-%03d", d), clock.t, "")
			s.Process(rec, &out)
			ref.Process(rec, &refOut)
		}
		st.commit(s)
		// Half-way: only unreachable levels are due, the store read is cut short.
		for _, end := range []int64{t0.Add(3*day + 8*time.Minute).UnixMilli(), t0.Add(11 * day).UnixMilli()} {
			ref.AdvanceTo(end, &refOut)
			for steps := 0; ; steps++ {
				n := len(out.Events)
				s.AdvanceTo(end, &out)
				st.commit(s)
				if len(out.Events) == n && !s.backlog {
					break
				}
				if steps > 1000 {
					t.Fatalf("step %d: still firing after %d steps", step, steps)
				}
			}
		}
		if len(out.Events) != 900 || !slices.EqualFunc(out.Events, refOut.Events, func(a, b Event) bool { return a.Key == b.Key && bytes.Equal(a.Value, b.Value) }) {
			t.Fatalf("step %d: %d events, reference %d; they differ", step, len(out.Events), len(refOut.Events))
		}
	}
}

// TestSilenceBacklogReadingFiresItsDevice: while due timers wait for later
// steps, a reading of a device whose levels are overdue first fires them,
// then recovers it: its silence is never lost to the step limit.
func TestSilenceBacklogReadingFiresItsDevice(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &testClock{t: t0}
	st := newEngineStore()
	s := storeSilence(t, clock, shippedLevels, st)
	s.maxFire = 1
	var out Output
	for d := range 3 {
		s.Process(reading(fmt.Sprintf("d%d", d), t0, ""), &out)
	}
	st.commit(s)
	end := t0.Add(11 * day)
	s.AdvanceTo(end.UnixMilli(), &out) // fires d0's unreachable only
	clock.t = end
	s.Process(reading("d2", end, ""), &out)
	var d2 []string
	for _, e := range decodeEvents(t, &out) {
		if e["device"] == "d2" {
			d2 = append(d2, e["event"].(string))
		}
	}
	if fmt.Sprint(d2) != "[unreachable alert1 alert2 recovered]" {
		t.Fatalf("d2 reported during a backlog: events %v, want [unreachable alert1 alert2 recovered]", d2)
	}
	for steps := 0; s.backlog || steps == 0; steps++ {
		st.commit(s)
		s.AdvanceTo(end.UnixMilli(), &out)
		if steps > 20 {
			t.Fatal("backlog never drains")
		}
	}
	st.commit(s)
	n := map[string]int{}
	for _, e := range decodeEvents(t, &out) {
		n[e["device"].(string)+" "+e["event"].(string)]++
	}
	for _, k := range []string{"d0 unreachable", "d0 alert1", "d0 alert2", "d1 unreachable", "d1 alert1", "d1 alert2", "d2 unreachable", "d2 recovered"} {
		if n[k] != 1 {
			t.Errorf("%s: %d times, want 1 (all: %v)", k, n[k], n)
		}
	}
}
