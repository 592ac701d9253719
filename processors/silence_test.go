package processors

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

var day = 24 * time.Hour

// shippedLevels are the levels of testdata/topologies/devices.yaml.
var shippedLevels = []SilenceLevel{
	{Name: "unreachable", After: 3 * day, Action: "status"},
	{Name: "alert1", After: 7 * day, Action: "alert"},
	{Name: "alert2", After: 10 * day, Action: "alert"},
}

const shippedIdle = 5 * time.Second // processors.idle_timeout as shipped

func newTestSilence(t *testing.T, clock Clock) *Silence {
	t.Helper()
	s, err := NewSilence(SilenceConfig{Levels: shippedLevels, Key: "device", Time: "ts",
		Carry: []string{"owner"}, Retire: "retired", MaxRecordBytes: 65536,
		IdleTimeout: shippedIdle, Live: true}, clock)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type event map[string]any

func decodeEvents(t *testing.T, out *Output) []event {
	t.Helper()
	var evs []event
	for _, e := range out.Events {
		var m event
		if err := json.Unmarshal(e.Value, &m); err != nil {
			t.Fatalf("event %s is not JSON: %v", e.Value, err)
		}
		if m["device"] != e.Key {
			t.Fatalf("event key %q, device %v", e.Key, m["device"])
		}
		evs = append(evs, m)
	}
	return evs
}

func reading(dev string, ts time.Time, extra string) Record {
	return Record{Value: []byte(fmt.Sprintf(`{"device":%q,"ts":%d,"owner":"o-%s"%s}`, dev, ts.UnixMilli(), dev, extra)),
		Timestamp: ts.UnixMilli()}
}

func ms(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// TestSilenceFiresOnTimeOnceEach steps the wall clock one tick at a time
// over eleven days of silence: each level fires at the first tick at or
// after its due time (never before), exactly once.
func TestSilenceFiresOnTimeOnceEach(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := &testClock{t: t0}
	s := newTestSilence(t, clock)
	var out Output
	s.Process(reading("d1", t0, ""), &out)
	if len(out.Events)+len(out.Rejected) != 0 {
		t.Fatalf("a first reading produced %v", out)
	}
	const tick = time.Minute
	var fired []event
	var firedWall []time.Time
	for clock.t = t0; clock.t.Before(t0.Add(12 * day)); clock.t = clock.t.Add(tick) {
		out.Reset()
		s.Tick(&out)
		for _, e := range decodeEvents(t, &out) {
			fired = append(fired, e)
			firedWall = append(firedWall, clock.t)
		}
	}
	if len(fired) != 3 {
		t.Fatalf("got %d events over 12 days, want 3: %v", len(fired), fired)
	}
	for i, l := range shippedLevels {
		e, due := fired[i], t0.Add(l.After)
		if e["event"] != l.Name || e["level"] != l.Name || e["action"] != l.Action || e["owner"] != "o-d1" {
			t.Errorf("event %d = %v, want level %s", i, e, l.Name)
		}
		if e["due_at"] != ms(due) || e["last_seen"] != ms(t0) || e["last_ingested"] != ms(t0) {
			t.Errorf("event %d times = %v, want due_at %s, last_seen %s", i, e, ms(due), ms(t0))
		}
		if w := firedWall[i]; w.Before(due) || !w.Before(due.Add(tick)) {
			t.Errorf("level %s fired at %s, want within one tick of %s", l.Name, w, due)
		}
		if e["fired_at"] != ms(firedWall[i]) {
			t.Errorf("level %s fired_at %v, want %s", l.Name, e["fired_at"], ms(firedWall[i]))
		}
	}
}

// TestSilenceReadingJustBeforeDueCancels: a reading 1 ms before the due
// time re-arms every level from its own ingestion time.
func TestSilenceReadingJustBeforeDueCancels(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &testClock{t: t0}
	s := newTestSilence(t, clock)
	var out Output
	s.Process(reading("d1", t0, ""), &out)
	t1 := t0.Add(3*day - time.Millisecond)
	clock.t = t1
	s.Process(reading("d1", t1, ""), &out)
	clock.t = t0.Add(3*day + time.Hour)
	s.Tick(&out)
	if len(out.Events) != 0 {
		t.Fatalf("the level fired although a reading came 1ms before its due time: %s", out.Events[0].Value)
	}
	clock.t = t1.Add(3 * day)
	s.Tick(&out)
	evs := decodeEvents(t, &out)
	if len(evs) != 1 || evs[0]["event"] != "unreachable" || evs[0]["due_at"] != ms(t1.Add(3*day)) {
		t.Fatalf("after the re-armed delay got %v, want unreachable due %s", evs, ms(t1.Add(3*day)))
	}
}

// TestSilenceRecovered: a device that reached alert1 reports again: one
// recovered event with the silence length and the highest level; it is
// re-armed from that reading.
func TestSilenceRecovered(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &testClock{t: t0}
	s := newTestSilence(t, clock)
	var out Output
	s.Process(reading("d1", t0, ""), &out)
	clock.t = t0.Add(8 * day)
	s.Tick(&out)
	if n := len(out.Events); n != 2 {
		t.Fatalf("after 8 days %d events, want unreachable and alert1", n)
	}
	out.Reset()
	back := clock.t.Add(time.Hour)
	clock.t = back
	// A late reading (event time long ago) still proves the device alive.
	late := Record{Value: []byte(fmt.Sprintf(`{"device":"d1","ts":%d,"owner":"o-new"}`, t0.Add(-day).UnixMilli())), Timestamp: back.UnixMilli()}
	s.Process(late, &out)
	evs := decodeEvents(t, &out)
	if len(evs) != 1 {
		t.Fatalf("recovery produced %v, want one recovered event", evs)
	}
	e := evs[0]
	want := float64(back.Sub(t0).Milliseconds())
	if e["event"] != "recovered" || e["highest"] != "alert1" || e["silent_ms"] != want ||
		e["recovered_at"] != ms(back) || e["last_seen"] != ms(t0) || e["owner"] != "o-d1" {
		t.Fatalf("recovered = %v, want highest alert1, silent_ms %v", e, want)
	}
	out.Reset()
	s.Process(reading("d1", back.Add(time.Minute), ""), &out)
	if len(out.Events) != 0 {
		t.Fatalf("a second reading emitted %s; recovered is once per silence", out.Events[0].Value)
	}
	clock.t = back.Add(3*day + time.Minute)
	s.Tick(&out)
	if evs := decodeEvents(t, &out); len(evs) != 1 || evs[0]["event"] != "unreachable" {
		t.Fatalf("after recovery the levels must re-arm from the last reading; got %v", evs)
	}
}

// checkpoint returns the state entries of s as a fresh restore would see them.
func checkpoint(s *Silence, into map[string][]byte) {
	s.Changes(func(k, v []byte) {
		if v == nil {
			delete(into, string(k))
		} else {
			into[string(k)] = append([]byte(nil), v...)
		}
	})
}

func restoreSilence(t *testing.T, clock Clock, state map[string][]byte) *Silence {
	t.Helper()
	s := newTestSilence(t, clock)
	for k, v := range state {
		if err := s.Restore([]byte(k), v); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// TestSilenceDowntime: timers that came due while kandle was down fire
// once, promptly (one idle_timeout) after start; a restart after that
// commit does not fire them again, and a crash before the commit fires
// them again exactly once (the events were in the aborted transaction).
func TestSilenceDowntime(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &testClock{t: t0}
	s := newTestSilence(t, clock)
	var out Output
	s.Process(reading("d1", t0, ""), &out)
	s.Process(reading("d2", t0.Add(time.Hour), ""), &out)
	committed := map[string][]byte{}
	checkpoint(s, committed)

	// Down from t0+1h to t0+4d: both devices' unreachable came due.
	clock.t = t0.Add(4 * day)
	r := restoreSilence(t, clock, committed)
	r.Tick(&out)
	if len(out.Events) != 0 {
		t.Fatal("fired before the partition was known to be caught up (idle_timeout after start)")
	}
	clock.t = clock.t.Add(shippedIdle)
	r.Tick(&out)
	evs := decodeEvents(t, &out)
	if len(evs) != 2 || evs[0]["device"] != "d1" || evs[1]["device"] != "d2" {
		t.Fatalf("after downtime got %v, want d1 and d2 unreachable once each", evs)
	}
	// Crash before the commit: the next owner fires them again (once).
	out.Reset()
	r2 := restoreSilence(t, clock, committed)
	clock.t = clock.t.Add(shippedIdle)
	r2.Tick(&out)
	r2.Tick(&out)
	if n := len(out.Events); n != 2 {
		t.Fatalf("a restart before the commit fired %d events, want the 2 again", n)
	}
	checkpoint(r2, committed)
	// Restart after the commit: nothing fires again.
	out.Reset()
	clock.t = clock.t.Add(time.Hour)
	r3 := restoreSilence(t, clock, committed)
	clock.t = clock.t.Add(shippedIdle)
	r3.Tick(&out)
	if len(out.Events) != 0 {
		t.Fatalf("a committed level fired twice: %s", out.Events[0].Value)
	}
}

// TestSilenceBacklogCancels: a consumer that restarts behind its input must
// not fire a timer that a reading in the backlog cancels: the backlog
// reading's ingestion time, not the wall clock, drives the silence clock.
func TestSilenceBacklogCancels(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &testClock{t: t0}
	s := newTestSilence(t, clock)
	var out Output
	s.Process(reading("d1", t0, ""), &out)
	committed := map[string][]byte{}
	checkpoint(s, committed)
	clock.t = t0.Add(4 * day) // restart 4 days later (unreachable was due at day 3), with a backlog
	r := restoreSilence(t, clock, committed)
	r.Process(reading("d1", t0.Add(2*day), ""), &out) // ingested at day 2, while we were down
	r.Process(reading("d9", t0.Add(4*day-time.Second), ""), &out)
	clock.t = clock.t.Add(shippedIdle)
	r.Tick(&out)
	if len(out.Events) != 0 {
		t.Fatalf("a level fired although the backlog held a reading in time: %s", out.Events[0].Value)
	}
}

// TestSilenceFutureTimestampCannotFireEarly: a record stamped a year ahead
// moves the silence clock no further than the wall clock.
func TestSilenceFutureTimestampCannotFireEarly(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &testClock{t: t0}
	s := newTestSilence(t, clock)
	var out Output
	s.Process(reading("d1", t0, ""), &out)
	clock.t = t0.Add(time.Second)
	s.Process(reading("d2", t0.Add(365*day), ""), &out)
	if len(out.Events) != 0 {
		t.Fatalf("a future-stamped record fired %s", out.Events[0].Value)
	}
}

// TestSilenceRetire: a retiring reading deletes the device's timer and state.
func TestSilenceRetire(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &testClock{t: t0}
	s := newTestSilence(t, clock)
	var out Output
	s.Process(reading("d1", t0, ""), &out)
	st := map[string][]byte{}
	checkpoint(s, st)
	s.Process(reading("d1", t0.Add(time.Minute), `,"retired":true`), &out)
	checkpoint(s, st)
	if _, ok := st["dd1"]; ok || s.Devices() != 0 || pendingTimers(s) != 0 {
		t.Fatalf("retired device still has state (%d devices, %d timers)", s.Devices(), pendingTimers(s))
	}
	clock.t = t0.Add(11 * day)
	s.Tick(&out)
	if len(out.Events) != 0 {
		t.Fatalf("a retired device fired %s", out.Events[0].Value)
	}
}

// TestSilenceRejects: bad readings are dead-lettered with stable reasons.
func TestSilenceRejects(t *testing.T) {
	clock := &testClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := newTestSilence(t, clock)
	for _, c := range []struct {
		in   string
		want Reason
	}{
		{`{"device":"d1",`, ReasonMalformedJSON},
		{`[1,2]`, ReasonNotObject},
		{`{"ts":1}`, ReasonMissingField},
		{`{"device":"d1"}`, ReasonMissingField},
		{`{"device":"d1","ts":"yesterday"}`, ReasonInvalidTS},
	} {
		var out Output
		s.Process(Record{Offset: 7, Value: []byte(c.in)}, &out)
		if len(out.Rejected) != 1 || out.Rejected[0].Reason != c.want || out.Rejected[0].Offset != 7 {
			t.Errorf("%s: rejected %v, want %s", c.in, out.Rejected, c.want)
		}
	}
	if s.Devices() != 0 {
		t.Fatal("a rejected record created device state")
	}
}

// TestSilenceReplayUsesInputTime: without a wall clock (replay) the levels
// fire by the ingestion times of the input itself.
func TestSilenceReplayUsesInputTime(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := NewSilence(SilenceConfig{Levels: shippedLevels, Key: "device", Time: "ts"}, FixedClock{T: t0.Add(100 * day)})
	if err != nil {
		t.Fatal(err)
	}
	var out Output
	s.Process(reading("d1", t0, ""), &out)
	s.Tick(&out) // no wall clock in replay
	if len(out.Events) != 0 {
		t.Fatal("replay fired by the wall clock")
	}
	s.Process(reading("d2", t0.Add(4*day), ""), &out)
	evs := decodeEvents(t, &out)
	if len(evs) != 1 || evs[0]["device"] != "d1" || evs[0]["fired_at"] != ms(t0.Add(4*day)) {
		t.Fatalf("replay events %v, want d1 unreachable fired at the next record's time", evs)
	}
}

// TestSilenceKeyCheck: with KeyCheck (the shipped default of a source) a
// reading keyed by anything but its device id is key_mismatch and creates
// no timer: a device on two partitions would otherwise get two.
func TestSilenceKeyCheck(t *testing.T) {
	s, err := NewSilence(SilenceConfig{Levels: shippedLevels, Key: "device", Time: "ts", KeyCheck: true},
		FixedClock{T: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	for i, key := range [][]byte{nil, []byte("d2")} {
		var out Output
		s.Process(Record{Offset: int64(i), Key: key, Value: []byte(`{"device":"d1","ts":1767225600000}`)}, &out)
		if len(out.Rejected) != 1 || out.Rejected[0].Reason != ReasonKeyMismatch || out.Rejected[0].Key != "d1" {
			t.Errorf("key %q: rejected %+v, want key_mismatch", key, out.Rejected)
		}
	}
	if s.Devices() != 0 {
		t.Fatal("a mis-keyed reading created device state")
	}
	var out Output
	s.Process(Record{Offset: 2, Key: []byte("d1"), Value: []byte(`{"device":"d1","ts":1767225600000}`)}, &out)
	if len(out.Rejected) != 0 || s.Devices() != 1 {
		t.Errorf("keyed reading: rejected %+v, devices %d; want accepted", out.Rejected, s.Devices())
	}
}

// pendingTimers counts the timers in s's state (store and changes).
func pendingTimers(s *Silence) int {
	n := 0
	s.scan([]byte{'t'}, []byte{'t' + 1}, func(k, _ []byte) bool {
		if !s.changed(parseTimerKey(k).id) {
			n++
		}
		return true
	})
	s.eachChangedTimer(func(timer) { n++ })
	return n
}
