package processors

import (
	"bytes"
	"container/heap"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/internal/invariant"
)

// SilenceLevel is one step of a device's silence: after After without a
// reading, an event named Name is emitted once (per silence) with Action.
type SilenceLevel struct {
	Name   string        // stable id, e.g. unreachable, alert1, alert2
	After  time.Duration // silence length that fires it
	Action string        // what the consumer should do, e.g. status or alert
}

// RecoveredEvent is the event name of a device reporting after a level fired.
const RecoveredEvent = "recovered"

// SilenceConfig configures a Silence processor.
type SilenceConfig struct {
	Levels []SilenceLevel // at least one; kept in order of After
	// Key and Time are the record fields (dotted paths) holding the device
	// id and the reading's event time.
	Key, Time string
	// Carry lists fields copied from a device's latest reading into its
	// events (e.g. owner), under their last path element.
	Carry []string
	// Retire names a boolean field: a reading with it true retires the
	// device (its timers are deleted, no event is emitted). Empty: none.
	Retire string
	// MaxRecordBytes rejects larger records (reason oversized); 0 = no limit.
	MaxRecordBytes int
	// KeyCheck rejects (key_mismatch) a reading whose record key is not its
	// device id: a device on two partitions would get two timers.
	KeyCheck bool
	// IdleTimeout (Live only): a partition without records for this long
	// (wall clock) is taken as caught up, and its silence clock follows the
	// wall clock. 0 = never.
	IdleTimeout time.Duration
	Live        bool
}

// Silence emits an event when a device has sent nothing for a level's
// delay, and a recovered event when a device that fired reports again.
//
// Time: silence is measured on the partition's ingestion clock I, not on
// event time (a quiet device moves no event time). Each reading's ingestion
// time is its record timestamp (event time when the record has none),
// capped at the wall clock in live mode so a future-stamped record cannot
// fire anything early. I = the largest ingestion time seen; in live mode a
// partition quiet for IdleTimeout is caught up and I follows the wall clock.
// A consumer behind its input therefore fires nothing that the backlog could
// still cancel, and a replay (no wall clock) fires by the input's own time.
// A level fires when I ≥ last reading's ingestion time + its delay.
//
// State lives in a StateStore (the engine's Pebble partition; in memory
// without an engine): one entry per device ("d"+id) and one per pending
// timer ("t"+due+id, due big-endian, so the store orders timers by due
// time). Each device has at most one pending timer, its next level. Only
// devices changed since the last Changes are held in memory, so memory does
// not grow with the number of devices, and firing reads only the timers
// that are due.
type Silence struct {
	levels []SilenceLevel
	dec    readingDecoder
	carry  [][]string
	carryN []string
	retire []string
	idle   int64
	live   bool
	clock  Clock

	store    StateStore
	mem      *memStore          // non-nil: no engine store, Changes applies here
	devs     map[string]*device // devices changed since the last Changes
	dirty    []*device
	nextDue  int64 // no timer is due before it (when nextOK)
	nextOK   bool
	maxFire  int  // timers fired per step at most (engine store), 0 = all
	backlog  bool // due timers are left over from the last step
	firedN   int  // timers handled since the last Changes
	err      error
	clockI   int64 // the ingestion clock I (ms)
	hasI     bool
	lastWall int64 // wall time of the last record (live)
	iDirty   bool
	buf      []byte
}

type device struct {
	id         string
	lastSeen   int64 // largest event time of its readings
	lastIngest int64 // ingestion time of its latest reading
	fired      int   // levels fired in the current silence
	carry      []byte
	due        int64 // due time of its pending timer (armed)
	armed      bool
	cpDue      int64 // its timer in the store (cpArmed), as of the last Changes
	cpArmed    bool
	dirty      bool
	deleted    bool
}

// NewSilence returns a Silence processor for one input partition.
func NewSilence(cfg SilenceConfig, clock Clock) (*Silence, error) {
	if len(cfg.Levels) == 0 {
		return nil, errors.New("silence: no levels (add levels: [{name: unreachable, after: 3d}])")
	}
	if clock == nil {
		return nil, errors.New("silence: no clock: pass SystemClock{} (live) or FixedClock (replay)")
	}
	if cfg.Key == "" || cfg.Time == "" {
		return nil, errors.New("silence: the key and time fields must be named")
	}
	levels := slices.Clone(cfg.Levels)
	seen := map[string]bool{}
	for _, l := range levels {
		switch {
		case l.Name == "" || l.Name == RecoveredEvent:
			return nil, fmt.Errorf("silence: level name %q is reserved or empty", l.Name)
		case seen[l.Name]:
			return nil, fmt.Errorf("silence: level %q is listed twice", l.Name)
		case l.After <= 0:
			return nil, fmt.Errorf("silence: level %q: after must be positive", l.Name)
		}
		seen[l.Name] = true
	}
	slices.SortStableFunc(levels, func(a, b SilenceLevel) int { return int(a.After - b.After) })
	s := &Silence{levels: levels, dec: newReadingDecoder(cfg.Key, cfg.Time, nil, cfg.MaxRecordBytes, cfg.KeyCheck),
		idle: cfg.IdleTimeout.Milliseconds(), live: cfg.Live, clock: clock,
		devs: map[string]*device{}}
	s.mem = newMemStore()
	s.store = s.mem
	for _, c := range cfg.Carry {
		path := strings.Split(c, ".")
		s.carry, s.carryN = append(s.carry, path), append(s.carryN, path[len(path)-1])
	}
	if cfg.Retire != "" {
		s.retire = strings.Split(cfg.Retire, ".")
	}
	if s.live {
		s.lastWall = clock.Now().UnixMilli() // after a start, quiet for IdleTimeout = caught up
	}
	return s, nil
}

// Levels returns the levels in order of delay.
func (s *Silence) Levels() []SilenceLevel { return s.levels }

// IngestClock returns the partition's ingestion clock I (ok false before any input).
func (s *Silence) IngestClock() (int64, bool) { return s.clockI, s.hasI }

// Devices returns the number of devices with state (it reads them all).
func (s *Silence) Devices() int {
	n := 0
	for _, d := range s.devs {
		if !d.deleted {
			n++
		}
	}
	s.scan([]byte{'d'}, []byte{'d' + 1}, func(k, _ []byte) bool {
		if _, ok := s.devs[string(k[1:])]; !ok {
			n++
		}
		return true
	})
	return n
}

// UseStore makes st the committed state (instead of Restore).
func (s *Silence) UseStore(st StateStore) error {
	s.store, s.mem, s.nextOK, s.maxFire = st, nil, false, silenceFireStep
	v, ok, err := st.Get(silenceClockKey)
	if err != nil {
		return fmt.Errorf("silence: read the ingestion clock: %w", err)
	}
	if ok {
		c, n := binary.Varint(v)
		if n <= 0 {
			return errors.New("silence: bad clock entry")
		}
		s.clockI, s.hasI = c, true
	}
	return nil
}

// silenceFireStep bounds the timers one step fires with an engine store, so
// the devices changed in one transaction stay bounded after a downtime.
const silenceFireStep = 10_000

// Err reports the first failed store read.
func (s *Silence) Err() error { return s.err }

func (s *Silence) scan(from, to []byte, fn func(k, v []byte) bool) {
	if err := s.store.Scan(from, to, fn); err != nil && s.err == nil {
		s.err = fmt.Errorf("silence: read state: %w", err)
	}
}

// load returns device id (nil: none), from the changes or the store.
func (s *Silence) load(id string) *device {
	if d, ok := s.devs[id]; ok {
		if d.deleted {
			return nil
		}
		return d
	}
	v, ok, err := s.store.Get(append([]byte{'d'}, id...))
	if err != nil {
		if s.err == nil {
			s.err = fmt.Errorf("silence: read device %q: %w", id, err)
		}
		return nil
	}
	if !ok {
		return nil
	}
	d, err := decodeDevice(id, v)
	if err != nil {
		if s.err == nil {
			s.err = err
		}
		return nil
	}
	return d
}

// Process handles one reading.
func (s *Silence) Process(rec Record, out *Output) {
	now := int64(0)
	if s.live {
		now = s.clock.Now().UnixMilli()
		s.lastWall = now
	}
	if rec.Value == nil && len(rec.Key) > 0 {
		// A tombstone keyed by a device retires it.
		if d := s.load(string(rec.Key)); d != nil {
			s.drop(d)
		}
		return
	}
	rd, ok := s.dec.decode(rec, out)
	if !ok {
		return
	}
	obj, id, ts := rd.obj, rd.id, rd.ts
	ing := rec.Timestamp
	if ing <= 0 {
		ing = ts
	}
	if s.live && ing > now {
		ing = now // a future-stamped record never fires anything early
	}
	s.advanceTo(ing, out)
	d := s.load(id)
	for s.backlog && d != nil && d.armed && d.due <= s.clockI {
		// Due timers are left for later steps: this device's fire now,
		// before the reading that ends its silence.
		s.fire(d, s.clockI, out)
	}
	if s.retire != nil {
		if v, ok := lookup(obj, s.retire); ok && string(v) == "true" {
			if d != nil {
				s.drop(d)
			}
			return
		}
	}
	if d == nil {
		d = &device{id: id, lastSeen: ts}
	}
	if d.fired > 0 {
		s.emitRecovered(d, ing, out)
	}
	d.lastSeen = max(d.lastSeen, ts)
	d.lastIngest = max(d.lastIngest, ing)
	d.fired = 0
	d.carry = s.carryOf(obj, d.carry[:0])
	s.schedule(d)
	s.touch(d)
}

// Tick moves the ingestion clock with the wall clock when the partition is
// caught up (live, quiet for IdleTimeout), firing what came due.
func (s *Silence) Tick(out *Output) {
	if !s.live || s.idle <= 0 {
		return
	}
	now := s.clock.Now().UnixMilli()
	if now-s.lastWall < s.idle {
		return
	}
	s.advanceTo(now, out)
}

// ResetIdle restarts the idle clock: the partition is behind its input, so
// its quiet time so far does not make it caught up.
func (s *Silence) ResetIdle() {
	if s.live {
		s.lastWall = s.clock.Now().UnixMilli()
	}
}

// AdvanceTo moves the ingestion clock to t (ms) and fires what came due.
// Replays and topology tests use it to let time pass without input.
func (s *Silence) AdvanceTo(t int64, out *Output) { s.advanceTo(t, out) }

func (s *Silence) advanceTo(t int64, out *Output) {
	if s.hasI && t <= s.clockI && !s.backlog {
		return
	}
	if !s.hasI || t > s.clockI {
		if invariant.Enabled {
			invariant.Check(!s.hasI || t > s.clockI, "silence: ingestion clock went back from %s to %s", fmtMS(s.clockI), fmtMS(t))
		}
		s.clockI, s.hasI, s.iDirty = t, true, true
	}
	t = s.clockI
	if !s.backlog && s.nextOK && t < s.nextDue {
		return
	}
	if s.stepDone() {
		s.backlog, s.nextOK = true, false
		return
	}
	s.backlog = false
	// The timers due by t, in (due, device) order; firing one may arm the
	// next level, due by t too after a downtime. With an engine store at
	// most maxFire are read and fired between two Changes (the changes of a
	// transaction stay bounded); the next step goes on where this one
	// stopped, in the same order.
	var due dueHeap
	var last timer
	truncated := false
	s.scan([]byte{'t'}, timerKey(t+1, ""), func(k, _ []byte) bool {
		tm := parseTimerKey(k)
		if s.changed(tm.id) {
			return true
		}
		if s.maxFire > 0 && due.Len() >= s.maxFire {
			truncated = true
			return false
		}
		heap.Push(&due, tm)
		last = tm
		return true
	})
	s.eachChangedTimer(func(tm timer) {
		if tm.due <= t {
			heap.Push(&due, tm)
		}
	})
	for due.Len() > 0 {
		if (truncated && timerLess(last, due[0])) || s.stepDone() {
			s.backlog, s.nextOK = true, false // unread stored timers come first
			return
		}
		tm := heap.Pop(&due).(timer)
		d := s.load(tm.id)
		if d == nil || !d.armed || d.due != tm.due {
			continue // stale: replaced since (its key goes with the next Changes)
		}
		s.fire(d, t, out)
		if d.armed && d.due <= t {
			heap.Push(&due, timer{d.due, d.id})
		}
	}
	if truncated {
		s.backlog, s.nextOK = true, false // stored timers past the ones read may be due
		return
	}
	// The next due time: the first stored timer after t, or a newer one.
	s.nextDue, s.nextOK = 1<<63-1, true
	s.scan(timerKey(t+1, ""), []byte{'t' + 1}, func(k, _ []byte) bool {
		tm := parseTimerKey(k)
		if s.changed(tm.id) {
			return true
		}
		s.nextDue = tm.due
		return false
	})
	s.eachChangedTimer(func(tm timer) {
		if tm.due > t {
			s.nextDue = min(s.nextDue, tm.due)
		}
	})
}

// changed says whether device id's stored timer may be out of date: with an
// engine store, the timers of devices changed since the last Changes are
// the ones in s.devs (the in-memory store is always current).
func (s *Silence) changed(id string) bool {
	if s.mem != nil {
		return false
	}
	_, ok := s.devs[id]
	return ok
}

// eachChangedTimer calls fn with the pending timers of the changed devices
// (with an engine store; they are not in it yet).
func (s *Silence) eachChangedTimer(fn func(timer)) {
	if s.mem != nil {
		return
	}
	for _, d := range s.devs {
		if d.armed && !d.deleted {
			fn(timer{d.due, d.id})
		}
	}
}

// stepDone says this step (since the last Changes) fired all it may.
func (s *Silence) stepDone() bool { return s.maxFire > 0 && s.firedN >= s.maxFire }

// fire handles d's pending timer, due by t: its level fires and the next
// one is armed (a delay lengthened since it was armed re-arms it instead).
func (s *Silence) fire(d *device, t int64, out *Output) {
	s.firedN++
	switch {
	case d.fired < len(s.levels) && d.lastIngest+s.levels[d.fired].After.Milliseconds() > t:
	case d.fired < len(s.levels):
		s.emitLevel(d, out)
		d.fired++
	}
	s.schedule(d)
	s.touch(d)
}

// schedule arms d's next level (replacing its pending timer), if any.
func (s *Silence) schedule(d *device) {
	s.disarm(d)
	if d.fired >= len(s.levels) {
		return
	}
	d.due, d.armed = d.lastIngest+s.levels[d.fired].After.Milliseconds(), true
	if s.mem != nil {
		s.mem.set(string(timerKey(d.due, d.id)), timerVal)
	}
	if s.nextOK {
		s.nextDue = min(s.nextDue, d.due)
	}
}

var timerVal = []byte{1}

// disarm cancels d's pending timer.
func (s *Silence) disarm(d *device) {
	if d.armed && s.mem != nil {
		s.mem.set(string(timerKey(d.due, d.id)), nil)
	}
	d.armed = false
}

func (s *Silence) drop(d *device) {
	s.disarm(d)
	d.deleted = true
	s.touch(d)
}

func (s *Silence) touch(d *device) {
	if !d.dirty {
		d.dirty = true
		s.dirty = append(s.dirty, d)
	}
	s.devs[d.id] = d
}

// emitLevel appends the event of d's next level, due now.
func (s *Silence) emitLevel(d *device, out *Output) {
	l := s.levels[d.fired]
	b := s.eventHead(d, l.Name)
	b = appendStr(append(b, `,"level":`...), l.Name)
	b = appendStr(append(b, `,"action":`...), l.Action)
	b = appendTime(append(b, `,"last_seen":`...), d.lastSeen)
	b = appendTime(append(b, `,"last_ingested":`...), d.lastIngest)
	b = appendTime(append(b, `,"due_at":`...), d.due)
	b = appendTime(append(b, `,"fired_at":`...), s.clockI)
	b = append(b, `,"silent_ms":`...)
	b = strconv.AppendInt(b, s.clockI-d.lastIngest, 10)
	out.Events = append(out.Events, Event{Key: d.id, Value: s.eventTail(b, d)})
}

// emitRecovered appends the recovered event of d, reporting again at ing.
func (s *Silence) emitRecovered(d *device, ing int64, out *Output) {
	b := s.eventHead(d, RecoveredEvent)
	b = appendStr(append(b, `,"level":`...), RecoveredEvent)
	b = appendStr(append(b, `,"highest":`...), s.levels[min(d.fired, len(s.levels))-1].Name)
	b = appendTime(append(b, `,"last_seen":`...), d.lastSeen)
	b = appendTime(append(b, `,"last_ingested":`...), d.lastIngest)
	b = appendTime(append(b, `,"recovered_at":`...), ing)
	b = append(b, `,"silent_ms":`...)
	b = strconv.AppendInt(b, ing-d.lastIngest, 10)
	out.Events = append(out.Events, Event{Key: d.id, Value: s.eventTail(b, d)})
}

func (s *Silence) eventHead(d *device, event string) []byte {
	b := appendStr(append(s.buf[:0], `{"device":`...), d.id)
	return appendStr(append(b, `,"event":`...), event)
}

func (s *Silence) eventTail(b []byte, d *device) []byte {
	b = append(b, d.carry...)
	b = append(b, '}')
	s.buf = b
	return bytes.Clone(b) // events outlive the next one built in s.buf
}

// carryOf renders the carried fields of a reading as `,"name":value` pairs.
func (s *Silence) carryOf(obj map[string]json.RawMessage, b []byte) []byte {
	for i, path := range s.carry {
		v, ok := lookup(obj, path)
		if !ok {
			continue
		}
		var c bytes.Buffer
		if json.Compact(&c, v) != nil {
			continue
		}
		b = appendStr(append(b, ','), s.carryN[i])
		b = append(append(b, ':'), c.Bytes()...)
	}
	return b
}

// Active does nothing: a silence processor has no candles.
func (s *Silence) Active(func(c *candle.Candle)) {}

// State entries: "I" holds the ingestion clock; "d"+device holds a device;
// "t"+due+device is a pending timer (due: 8 bytes big-endian, sign bit
// flipped, so keys sort by due time, then device).
var silenceClockKey = []byte("I")

func timerKey(due int64, id string) []byte {
	k := binary.BigEndian.AppendUint64([]byte{'t'}, uint64(due)^1<<63)
	return append(k, id...)
}

type timer struct {
	due int64
	id  string
}

func parseTimerKey(k []byte) timer {
	if len(k) < 9 {
		return timer{}
	}
	return timer{int64(binary.BigEndian.Uint64(k[1:9]) ^ 1<<63), string(k[9:])}
}

// Changes reports the changed devices, timers and the ingestion clock, and
// forgets them (they are the store's from now on).
func (s *Silence) Changes(fn func(key, val []byte)) {
	emit := func(k string, v []byte) {
		fn([]byte(k), v)
		if s.mem != nil {
			s.mem.set(k, v)
		}
	}
	for i, d := range s.dirty {
		s.dirty[i] = nil
		d.dirty = false
		// Its timer: only the change since the last Changes is written
		// (timers armed and replaced in between never reach the store).
		moved := d.deleted || d.armed != d.cpArmed || d.due != d.cpDue
		if d.cpArmed && moved {
			fn(timerKey(d.cpDue, d.id), nil)
		}
		if !d.deleted && d.armed && moved {
			fn(timerKey(d.due, d.id), timerVal)
		}
		d.cpArmed, d.cpDue = d.armed && !d.deleted, d.due
		k := "d" + d.id
		if d.deleted {
			emit(k, nil)
			continue
		}
		v := binary.AppendVarint(nil, d.lastSeen)
		v = binary.AppendVarint(v, d.lastIngest)
		v = binary.AppendUvarint(v, uint64(d.fired))
		if d.armed {
			v = append(v, 1)
			v = binary.AppendVarint(v, d.due)
		} else {
			v = append(v, 0)
		}
		v = append(v, d.carry...)
		emit(k, v)
	}
	s.dirty = s.dirty[:0]
	clear(s.devs)
	s.firedN = 0
	if s.iDirty {
		s.iDirty = false
		fn(silenceClockKey, binary.AppendVarint(nil, s.clockI))
	}
}

func decodeDevice(id string, val []byte) (*device, error) {
	r := reader{b: val}
	d := &device{id: id}
	d.lastSeen, d.lastIngest = r.varint(), r.varint()
	d.fired = int(r.uvarint())
	if len(r.b) == 0 {
		r.err = errors.New("truncated")
	} else {
		d.armed = r.b[0] == 1
		r.b = r.b[1:]
		if d.armed {
			d.due = r.varint()
		}
	}
	d.cpArmed, d.cpDue = d.armed, d.due
	if r.err != nil {
		return nil, fmt.Errorf("silence: device %q: %w", id, r.err)
	}
	d.carry = bytes.Clone(r.b)
	return d, nil
}

// Restore loads one entry written by Changes (processors without a
// StateStore from the engine).
func (s *Silence) Restore(key, val []byte) error {
	if bytes.Equal(key, silenceClockKey) {
		v, n := binary.Varint(val)
		if n <= 0 {
			return errors.New("silence: bad clock entry")
		}
		s.clockI, s.hasI = v, true
		return nil
	}
	switch {
	case len(key) >= 2 && key[0] == 'd':
		if _, err := decodeDevice(string(key[1:]), val); err != nil {
			return err
		}
	case len(key) >= 9 && key[0] == 't':
	default:
		return fmt.Errorf("silence: unknown state entry %q", key)
	}
	if s.mem == nil {
		return errors.New("silence: Restore after UseStore")
	}
	s.mem.set(string(key), bytes.Clone(val))
	s.nextOK = false
	return nil
}

// lookup follows a dotted path through nested objects.
func lookup(obj map[string]json.RawMessage, path []string) (json.RawMessage, bool) {
	for i, p := range path {
		v, ok := obj[p]
		if !ok || string(v) == "null" {
			return nil, false
		}
		if i == len(path)-1 {
			return v, true
		}
		obj = nil
		if json.Unmarshal(v, &obj) != nil {
			return nil, false
		}
	}
	return nil, false
}

func appendStr(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a Go string always marshals; invalid UTF-8 becomes U+FFFD
	return append(b, q...)
}

func appendTime(b []byte, ms int64) []byte {
	b = append(b, '"')
	b = time.UnixMilli(ms).UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	return append(b, '"')
}

// dueHeap orders the timers being fired by due time, then device id.
type dueHeap []timer

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return timerLess(h[i], h[j]) }

func timerLess(a, b timer) bool {
	if a.due != b.due {
		return a.due < b.due
	}
	return a.id < b.id
}
func (h dueHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)   { *h = append(*h, x.(timer)) }
func (h *dueHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}
