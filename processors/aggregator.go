package processors

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/internal/invariant"
)

// CandleConfig configures an Aggregator.
type CandleConfig struct {
	Timeframe candle.Timeframe
	// Lateness is how far event time may run backwards: W = max event time − Lateness.
	Lateness time.Duration
	// IdleTimeout (Live only) advances the watermark by the wall clock after
	// this long without records. 0 = never.
	IdleTimeout time.Duration
	// MaxFuture rejects records stamped further ahead of the clock. 0 = no guard.
	MaxFuture time.Duration
	// MaxIdle bounds gap filling: a key gets gap candles only for windows
	// that open less than MaxIdle after its last trade. When the run ends the
	// key's state is freed; a later trade starts a new run without filling
	// the silence. 0 = fill forever.
	MaxIdle time.Duration
	// StateLateness is the lateness the restored state was written under
	// when its partition entry holds no watermark (state written by a
	// kandle from before the watermark was stored): the watermark restores
	// as max event time − StateLateness, not − Lateness, so a lateness
	// raised since never reopens a window that was already emitted. Nil:
	// Lateness.
	StateLateness *time.Duration
	Dedupe        bool // reject repeated trade ids of a key
	GapFill       bool // emit flat gap candles for windows without trades
	Live          bool // allow the wall-clock idle advance (replays leave it false)
	Decoder       *Decoder
	// Rollups are the timeframes built from these candles, directly or
	// through other rollups. When a key's run of candles ends (max_idle, or
	// without gap fill its last open window), the aggregator emits a
	// QuietMark at each of their boundaries that ends a window holding the
	// key's last candle, once the watermark reaches it, so the rollups close
	// those windows as direct aggregation would and free the key; then it
	// frees the key itself. Empty: the key is freed at once. Without gap
	// fill a key with a later window open gets marks too, at the boundaries
	// that fall in the silence before that window: no sub-candle ends there.
	Rollups []candle.Timeframe
	// ReviseWithin is the revision horizon: a trade late for its window
	// (the watermark passed it) but for a window that closed less than
	// ReviseWithin before the watermark updates that window, and the
	// candle is emitted again with Rev one higher; so do cancels and
	// corrections (candle.Trade.Action) of trades inside it. 0 = off: late
	// trades are rejected as late, as without revisions.
	ReviseWithin time.Duration
}

// Aggregator builds base candles from the trades of one input partition. It
// is single-goroutine and deterministic: its outputs depend only on the
// records it is given, the state it restored and (for MaxFuture, and for the
// idle advance when Live) the Clock.
type Aggregator struct {
	tf                    candle.Timeframe
	tfName                string
	lateness, maxFuture   int64 // ms
	idleTimeout, maxIdle  int64 // ms
	stateLateness         int64 // ms: see CandleConfig.StateLateness
	dedupe, gapFill, live bool
	keyCheck              bool
	side                  bool // the decoder maps an aggressor side: candles carry taker volumes
	dec                   *Decoder
	clock                 Clock
	rollups               []candle.Timeframe
	horizon               int64 // ms: CandleConfig.ReviseWithin, 0 = off

	keys table[*keyState]
	heap keyHeap

	// Partition state.
	hasMax bool
	maxTS  int64 // max accepted event time (or idle-advanced time)
	// wm is the watermark W (valid when hasMax): max event time − lateness,
	// but never lower than it ever was, also across a restore under a
	// longer lateness. Windows closing at or before it were emitted.
	wm        int64
	hasWall   bool
	lastWall  int64 // wall time (ms) of the last record, Live only
	partDirty bool

	dirty  []*keyState // changed since the last Changes call
	active []*keyState // changed since the last Active call

	orphans map[string][]idChunk // restored id chunks waiting for their key entry

	// Revisions (horizon > 0), see revise.go.
	revKeys     []*keyState          // keys with pending revisions
	hasRevFrom  bool                 // reviseFrom is valid
	reviseFrom  int64                // windows closing at or before it were emitted without a horizon
	tstash      map[string][]tchunk  // restored trade-log chunks, replayed by resolve
	kstash      map[string][]keptWin // restored kept windows, given to their keys by resolve
	needResolve bool                 // Restore ran: resolve before the next use
	counts      RevisionCounts       // since the last TakeRevisionCounts

	finals finals // the invariants build only

	trade   candle.Trade
	winPool []*window
	scratch candle.Candle
	idStrs  idStrings // the trade id strings of candles
	// eagerIDs (tests only) writes every dedupe id out as it is added, as
	// the aggregator did before appendNum left that to the checkpoint:
	// TestLazyIDChunksSameBytes compares the two.
	eagerIDs bool
	kbuf     []byte
	vbuf     []byte
}

// keyState is everything the aggregator knows about one key.
type keyState struct {
	// The fields a trade touches come first, on as few cache lines as
	// they fit.
	key                 string
	wins                []*window // open windows with trades, by open time
	curOpen, curClose   int64     // window of the last trade (cache)
	cur                 *window   // that window while it is open, else nil
	nextOpen            int64     // gap fill: the next window to emit
	nextClose           int64
	lastTS              int64  // largest event time of the key's trades
	pending             int64  // close time that makes this key emit next
	hidx                int    // index in the heap, -1 when not scheduled
	maxNum              uint64 // ≥ every numeric trade id the open windows hold (when hasNum)
	started             bool   // had a trade; nextOpen/lastTS are valid
	admitted            bool   // a trade of it passed the decoder's key check (restored keys have not)
	hasNum              bool
	dirty, act, deleted bool
	hasPrev             bool

	prevClose decimal.Decimal // close of the last emitted candle
	prevTS    int64           // largest event time of the emitted windows' trades (when hasPrev)
	dropped   []droppedWin    // emitted windows whose id chunks must be deleted
	lastN     int             // trades in the key's last emitted window (a size hint)

	// Quiet: the key's run ended; every window opening before quietAt is
	// emitted, and the next QuietMark is at quietNext.
	quiet              bool
	quietAt, quietNext int64

	revState // the kept windows of the revision horizon (revise.go)
}

// sizeHint is how many trades k's next window will likely hold: as many as
// its last emitted window, or its latest open one when it has emitted none.
func (k *keyState) sizeHint() int {
	if n := len(k.wins); k.lastN == 0 && n > 0 {
		return int(min(k.wins[n-1].n, 1<<12))
	}
	return k.lastN
}

// newNum reports whether numeric id n is above every numeric id k holds.
func (k *keyState) newNum(n uint64) bool { return !k.hasNum || n > k.maxNum }

// noteID raises maxNum for a numeric id added to one of k's windows.
func (k *keyState) noteID(n uint64, isNum bool) {
	if isNum && k.newNum(n) {
		k.maxNum, k.hasNum = n, true
	}
}

// NewAggregator checks cfg and returns an Aggregator with empty state.
func NewAggregator(cfg CandleConfig, clock Clock) (*Aggregator, error) {
	if cfg.Timeframe.N <= 0 || cfg.Timeframe.Unit < candle.Second || cfg.Timeframe.Unit > candle.Month {
		return nil, fmt.Errorf("aggregator: invalid timeframe %+v: build it with candle.ParseTimeframe", cfg.Timeframe)
	}
	for _, r := range cfg.Rollups {
		if err := candle.Nests(cfg.Timeframe, r); err != nil {
			return nil, fmt.Errorf("aggregator: rollup %s: %w", r, err)
		}
	}
	if cfg.Decoder == nil {
		return nil, errors.New("aggregator: no decoder: build one with NewDecoder")
	}
	if clock == nil {
		return nil, errors.New("aggregator: no clock: pass SystemClock{} (live) or FixedClock (replay)")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"lateness", cfg.Lateness}, {"idle_timeout", cfg.IdleTimeout}, {"max_future", cfg.MaxFuture}, {"max_idle", cfg.MaxIdle}, {"revise_within", cfg.ReviseWithin}} {
		if d.v < 0 {
			return nil, fmt.Errorf("aggregator: %s is negative (%s): use 0 to turn it off", d.name, d.v)
		}
	}
	stateLateness := cfg.Lateness
	if cfg.StateLateness != nil {
		if *cfg.StateLateness < 0 {
			return nil, fmt.Errorf("aggregator: state lateness is negative (%s)", *cfg.StateLateness)
		}
		stateLateness = *cfg.StateLateness
	}
	return &Aggregator{
		tf: cfg.Timeframe, tfName: cfg.Timeframe.String(), stateLateness: stateLateness.Milliseconds(),
		lateness: cfg.Lateness.Milliseconds(), maxFuture: cfg.MaxFuture.Milliseconds(),
		idleTimeout: cfg.IdleTimeout.Milliseconds(), maxIdle: cfg.MaxIdle.Milliseconds(),
		dedupe: cfg.Dedupe, gapFill: cfg.GapFill, live: cfg.Live,
		keyCheck: cfg.Decoder.cfg.KeyCheck, side: cfg.Decoder.HasSide(), rollups: slices.Clone(cfg.Rollups),
		dec: cfg.Decoder, clock: clock, horizon: cfg.ReviseWithin.Milliseconds(),
		keys: newTable[*keyState](), finals: newFinals(),
	}, nil
}

// Watermark returns W = max event time − lateness (never lower than it has
// been: after a lateness was raised it holds still until the max event
// time catches up); ok is false before the first accepted record.
func (a *Aggregator) Watermark() (w int64, ok bool) { return a.wm, a.hasMax }

func reject(out *Output, rec Record, rej Rejection) {
	rej.Partition, rej.Offset, rej.Value = rec.Partition, rec.Offset, rec.Value
	out.Rejected = append(out.Rejected, rej)
}

// Process decodes, validates and aggregates one record. Candles whose
// windows it closes are appended to out.Candles; a rejected record is
// appended to out.Rejected and changes nothing else.
func (a *Aggregator) Process(rec Record, out *Output) {
	if a.needResolve {
		a.resolve()
	}
	k, quote, ok := a.decodeRecord(rec, out)
	if ok {
		a.apply(rec, k, quote, out)
	}
}

// decodeRecord decodes rec into a.trade and checks its key and time; a
// rejected record is appended to out.Rejected (ok false). k is the key's
// state (nil: a new key), quote the trade's exact price × qty.
func (a *Aggregator) decodeRecord(rec Record, out *Output) (k *keyState, quote decimal.Sum, ok bool) {
	var now int64 // wall clock (ms), read only when needed
	if a.live || a.maxFuture > 0 {
		now = a.clock.Now().UnixMilli()
	}
	if a.live {
		a.lastWall, a.hasWall, a.partDirty = now, true, true
	}
	t := &a.trade
	kb, ok := a.dec.scan(rec.Value, t, &quote)
	if !ok {
		reject(out, rec, a.dec.rej)
		return nil, quote, false
	}
	k, _ = a.keys.get(kb)
	if k != nil && k.admitted {
		t.Key = k.key
	} else if t.Key, ok = a.dec.intern(kb); !ok {
		reject(out, rec, a.dec.rej)
		return nil, quote, false
	}
	if a.keyCheck && !bytes.Equal(rec.Key, kb) {
		reject(out, rec, a.keyMismatch(rec.Key, t.Key))
		return nil, quote, false
	}
	if a.maxFuture > 0 {
		if t.TS > now+a.maxFuture {
			reject(out, rec, Rejection{Reason: ReasonFuture, Key: t.Key,
				Detail: fmt.Sprintf("event time %s is more than %s ahead of the clock (%s)",
					fmtMS(t.TS), time.Duration(a.maxFuture)*time.Millisecond, fmtMS(now))})
			return nil, quote, false
		}
	}
	return k, quote, true
}

// apply counts the decoded trade a.trade of key k (nil: new) into its
// window, or hands it to the revision code when it is late or takes back
// an earlier trade.
func (a *Aggregator) apply(rec Record, k *keyState, quote decimal.Sum, out *Output) {
	t := &a.trade
	if t.Action != candle.ActionTrade {
		a.takeBack(rec, k, t, quote, out)
		return
	}
	var open, close int64
	if k != nil && t.TS >= k.curOpen && t.TS < k.curClose {
		open, close = k.curOpen, k.curClose
	} else {
		open = a.tf.Start(t.TS)
		close = a.tf.End(open)
	}
	if a.hasMax && close <= a.wm {
		if a.revisable(k, open, close) {
			a.lateTrade(rec, k, t, quote, open, close, out)
			return
		}
		reject(out, rec, Rejection{Reason: ReasonLate, Key: t.Key,
			Detail: fmt.Sprintf("window %s of %s closed: watermark is %s%s", fmtMS(open), a.tfName, fmtMS(a.wm), a.beyond(close))})
		return
	}
	var w *window
	checkID := a.dedupe && t.ID != ""
	var idNum uint64
	var idIsNum bool
	if checkID {
		idNum, idIsNum = numericID(t.ID)
	}
	fresh := idIsNum && (k == nil || k.newNum(idNum))
	if k != nil {
		// A numeric id above every numeric id the key holds is new: the
		// common case (exchanges number trades upwards) touches no window.
		if checkID && !fresh {
			for _, x := range k.wins {
				if x.hasParsedID(t.ID, idNum, idIsNum) {
					reject(out, rec, Rejection{Reason: ReasonDuplicate, Key: t.Key,
						Detail: fmt.Sprintf("trade id %q was already counted", t.ID)})
					return
				}
			}
		}
		if w = k.cur; w == nil || w.open != open {
			w = k.find(open)
		}
	}
	v, q := decimal.SumOf(t.Qty), quote
	if w != nil { // exact sums: they widen instead of failing
		v, q = w.v.AddDecimal(t.Qty), w.q.Add(quote)
	}
	if k == nil {
		k = &keyState{key: t.Key, hidx: -1}
		a.keys.put(k.key, k)
	}
	k.admitted = true
	if w == nil {
		w = a.newWindow(open, close)
		w.tk = a.side
		if hint := k.sizeHint(); checkID && cap(w.nums) < hint && idIsNum {
			// Size the id list like the key's last window, with room for a
			// busier one: no regrowth per trade, and a recycled window's list
			// usually fits the next key that takes it.
			w.nums = make([]uint64, 0, hint+hint/4+4)
		}
		k.insert(w)
	}
	w.add(t, v, q, quote)
	if a.horizon > 0 {
		k.keep(w, t, quote)
	}
	switch {
	case checkID && fresh && !a.eagerIDs: // above every id of w too: no look at w's ids
		w.appendNum(idNum)
		k.maxNum, k.hasNum = idNum, true
	case checkID:
		w.addParsedID(t.ID, idNum, idIsNum, true)
		k.noteID(idNum, idIsNum)
	}
	k.curOpen, k.curClose, k.cur = open, close, w
	if !k.started || t.TS > k.lastTS {
		k.lastTS = t.TS
	}
	if a.gapFill && (!k.started || open < k.nextOpen) {
		k.nextOpen, k.nextClose = open, close
	}
	k.started = true
	a.touch(k)
	if !k.act {
		k.act = true
		a.active = append(a.active, k)
	}
	a.schedule(k)
	if !a.hasMax || t.TS > a.maxTS {
		if invariant.Enabled {
			invariant.Check(!a.hasMax || t.TS > a.maxTS, "aggregator %s: max event time went back from %s to %s", a.tfName, fmtMS(a.maxTS), fmtMS(t.TS))
		}
		if !a.hasMax {
			a.wm = t.TS - a.lateness
		}
		a.maxTS, a.hasMax, a.partDirty = t.TS, true, true
		a.advance(out)
	}
}

// Tick advances the watermark by the wall clock when the partition has been
// idle for IdleTimeout. It does nothing unless Live and IdleTimeout > 0.
//
// The idle clock is this process's: it starts at the last record, at the
// restore, or at the last ResetIdle, whichever is latest. The caller calls
// Tick only while the partition is caught up with its input and ResetIdle
// while it is not, so a consumer that is behind never advances by the wall
// clock.
func (a *Aggregator) Tick(out *Output) {
	if a.needResolve {
		a.resolve()
	}
	if !a.live || a.idleTimeout <= 0 || !a.hasMax {
		return
	}
	now := a.clock.Now().UnixMilli()
	if !a.hasWall { // the first look at a partition restored without an idle clock
		a.lastWall, a.hasWall = now, true
		return
	}
	if now-a.lastWall < a.idleTimeout {
		return
	}
	if ts := now - a.idleTimeout; ts > a.maxTS {
		a.maxTS, a.partDirty = ts, true
		a.advance(out)
	}
}

// ResetIdle restarts the idle clock: the partition is not caught up with its
// input (a backlog, a slow fetch, records in flight), so its quiet time so
// far does not count.
func (a *Aggregator) ResetIdle() {
	if a.live {
		a.lastWall, a.hasWall = a.clock.Now().UnixMilli(), true
	}
}

// Active calls fn with the open candle (the latest open window) of every key
// whose candle changed since the last Active call, then forgets them. The
// candle is only valid during fn.
func (a *Aggregator) Active(fn func(c *candle.Candle)) {
	if a.needResolve {
		a.resolve()
	}
	for i, k := range a.active {
		a.active[i] = nil
		k.act = false
		if k.deleted || len(k.wins) == 0 {
			continue
		}
		a.fillCandle(&a.scratch, k, k.wins[len(k.wins)-1])
		fn(&a.scratch)
	}
	a.active = a.active[:0]
}

// keyMismatch is the rejection of a record whose partition key is not its
// key field.
func (a *Aggregator) keyMismatch(recKey []byte, key string) Rejection {
	what := fmt.Sprintf("record key %q differs from", recKey)
	if recKey == nil {
		what = "the record has no key;"
	}
	f := a.dec.names[fKey]
	return Rejection{Reason: ReasonKeyMismatch, Key: key,
		Detail: fmt.Sprintf("%s field %q = %q: produce each record with its %s as the record key (Kafka) "+
			"or partition key (Kinesis) so one key stays in one partition, or set key_check: false on the source",
			what, f, key, f)}
}

// fmtMS formats Unix ms for rejection details.
func fmtMS(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z") }
