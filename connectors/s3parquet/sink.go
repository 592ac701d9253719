package s3parquet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kandle/kandle/internal/clock"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/sinkkit"
	"github.com/kandle/kandle/decimal"
)

// Sink buffers closed candles and upserts them into the lake. Its methods
// are safe for concurrent use, but the engine calls them from one stage.
type Sink struct {
	cfg        Config
	st         store
	log        *slog.Logger
	m          *metrics
	clock      clock.Clock
	minBackoff time.Duration
	cache      *writeCache // nil with unconditional writes: nothing fences a write based on it
	enc        *encoder
	encoders   int // objects encoded at once during a flush

	mu     sync.Mutex
	closed bool
	buf    map[partKey]*part
	rows   int       // candles buffered
	bytes  int       // rough memory of the buffered candles
	oldest time.Time // when the buffer got its first candle; zero when empty
}

// partKey names one object: a (timeframe, symbol, UTC day) partition.
type partKey struct {
	tf, sym string
	day     int64
}

type part struct {
	byOpen map[int64]candle.Candle // open_time → highest rev, newest write among equals
	bytes  int
}

// New opens the lake named by cfg.URL. For S3 it checks once that the
// bucket is reachable, so a wrong bucket, endpoint or credential fails at
// startup with a message instead of pausing the stage later.
func New(ctx context.Context, cfg Config, opts ...Option) (*Sink, error) {
	cfg = cfg.withDefaults()
	if bad := cfg.Validate(); len(bad) > 0 {
		return nil, fmt.Errorf("s3parquet: invalid config: %s", strings.Join(bad, "; "))
	}
	loc, _ := parseURL(cfg.URL) // Validate checked it
	o := options{log: slog.Default(), name: "s3parquet", clock: clock.System{}, minBackoff: 100 * time.Millisecond}
	for _, opt := range opts {
		opt(&o)
	}
	m, err := newMetrics(o.reg, o.name)
	if err != nil {
		return nil, fmt.Errorf("s3parquet: %w", err)
	}
	encoders := max(1, min(cfg.Concurrency, runtime.GOMAXPROCS(0)))
	enc, err := newEncoder(encoders)
	if err != nil {
		return nil, fmt.Errorf("s3parquet: %w", err)
	}
	s := &Sink{
		cfg: cfg, m: m, clock: o.clock, minBackoff: o.minBackoff, enc: enc, encoders: encoders,
		log: o.log.With("sink", o.name, "url", cfg.URL),
		buf: map[partKey]*part{},
	}
	if !cfg.UnconditionalWrites {
		s.cache = newWriteCache(cfg.WriteCacheBytes)
	}
	if loc.isFile() {
		if err := os.MkdirAll(loc.dir, 0o755); err != nil {
			return nil, fmt.Errorf("s3parquet: create lake folder %s: %w; check the url and the folder's permissions", loc.dir, err)
		}
		s.st = &fileStore{dir: loc.dir}
		return s, nil
	}
	st, err := newS3Store(ctx, cfg, loc, o)
	if err != nil {
		return nil, err
	}
	s.st = st
	return s, nil
}

// Write buffers cs and flushes what the flush policy asks for. Candles that
// can never be stored are skipped and returned in a *RejectedError; the rest
// are accepted. An error from a flush leaves the candles buffered.
func (s *Sink) Write(ctx context.Context, cs []candle.Candle) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("s3parquet: write after Close")
	}
	var rej []Rejected
	touched := map[[2]string]bool{}
	for i := range cs {
		c := &cs[i]
		if why := check(c); why != "" {
			rej = append(rej, Rejected{Candle: *c, Reason: why})
			continue
		}
		k := partKey{tf: c.Timeframe, sym: c.Symbol, day: dayOf(c.OpenTime)}
		p := s.buf[k]
		if p == nil {
			p = &part{byOpen: map[int64]candle.Candle{}}
			s.buf[k] = p
		}
		if prev, ok := p.byOpen[c.OpenTime]; !ok {
			n := candleBytes(c)
			p.bytes += n
			s.bytes += n
			s.rows++
		} else if !replaces(c, &prev) {
			s.m.staleRevs.Inc()
			continue
		}
		p.byOpen[c.OpenTime] = *c
		if s.oldest.IsZero() {
			s.oldest = s.clock.Now()
		}
		touched[[2]string{c.Timeframe, c.Symbol}] = true
	}
	var err error
	switch {
	case s.rows >= s.cfg.FlushRows, s.bytes >= s.cfg.FlushBytes,
		!s.oldest.IsZero() && s.clock.Now().Sub(s.oldest) >= s.cfg.FlushAge:
		err = s.flush(ctx, s.keys(nil))
	default:
		if done := s.completedDays(touched); len(done) > 0 {
			err = s.flush(ctx, done)
		}
	}
	if len(rej) > 0 {
		s.m.rejected.Add(float64(len(rej)))
		if err == nil {
			return &RejectedError{Rejected: rej}
		}
		return errors.Join(err, &RejectedError{Rejected: rej})
	}
	return err
}

// Flush stores everything buffered. When it returns nil, every candle
// passed to Write so far is durable. It retries transient failures until
// ctx ends.
func (s *Sink) Flush(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flush(ctx, s.keys(nil))
}

// FlushInterval is how often the engine should flush and commit: the
// configured flush_age, since every flush rewrites the day objects it touches.
func (s *Sink) FlushInterval() time.Duration { return s.cfg.FlushAge }

// Close flushes the buffer; after it returns nil the sink takes no more
// writes. If the flush fails the sink stays open and Close may be retried.
func (s *Sink) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if err := s.flush(ctx, s.keys(nil)); err != nil {
		return err
	}
	s.closed = true
	return nil
}

// Buffered returns how many candles wait in the buffer. Flush rewrites
// whole day objects, so an engine that commits offsets often can skip
// Flush and the commit while Buffered() > 0 and commit when it is 0: Write
// empties the buffer itself when flush_rows, flush_bytes or flush_age says so.
func (s *Sink) Buffered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rows
}

// keys returns the buffered partitions accepted by keep (nil: all), sorted
// so flushes touch objects in a stable order.
func (s *Sink) keys(keep func(partKey) bool) []partKey {
	ks := make([]partKey, 0, len(s.buf))
	for k := range s.buf {
		if keep == nil || keep(k) {
			ks = append(ks, k)
		}
	}
	slices.SortFunc(ks, func(a, b partKey) int {
		return cmp.Or(cmp.Compare(a.tf, b.tf), cmp.Compare(a.sym, b.sym), cmp.Compare(a.day, b.day))
	})
	return ks
}

// completedDays returns the buffered days of the touched series that are
// older than that series' newest buffered day: a later day has begun, so
// they will get no more candles in order.
func (s *Sink) completedDays(touched map[[2]string]bool) []partKey {
	newest := map[[2]string]int64{}
	for k := range s.buf {
		sk := [2]string{k.tf, k.sym}
		if touched[sk] {
			if d, ok := newest[sk]; !ok || k.day > d {
				newest[sk] = k.day
			}
		}
	}
	return s.keys(func(k partKey) bool {
		d, ok := newest[[2]string{k.tf, k.sym}]
		return ok && k.day < d
	})
}

// flush upserts the given partitions and drops the ones that succeeded
// from the buffer. The caller holds s.mu.
//
// Encoding and uploading are separate stages, so the requests stay in
// flight while the next objects are encoded: up to one encoder per core
// (at most concurrency) prepares each object's bytes (prepare) and hands
// them to concurrency uploaders (upsert), which PUT them and, when a PUT
// is refused or fails, fall back to reading and merging the object. At
// most concurrency prepared objects wait for an uploader.
func (s *Sink) flush(ctx context.Context, keys []partKey) error {
	if len(keys) == 0 {
		return nil
	}
	start := time.Now()
	parts := make([]*part, len(keys))
	for i, k := range keys {
		parts[i] = s.buf[k]
	}
	errs := make([]error, len(keys))
	next := make(chan int)
	uploaders := max(1, s.cfg.Concurrency)
	ready := make(chan *write, uploaders)
	var encoding, uploading sync.WaitGroup
	for range min(s.encoders, len(keys)) {
		encoding.Go(func() {
			for i := range next {
				ready <- s.prepare(ctx, i, keys[i], parts[i])
			}
		})
	}
	for range min(uploaders, len(keys)) {
		uploading.Go(func() {
			for w := range ready {
				errs[w.i] = s.upsert(ctx, w)
			}
		})
	}
	for i := range keys {
		next <- i
	}
	close(next)
	encoding.Wait()
	close(ready)
	uploading.Wait()

	var failed []error
	for i, k := range keys {
		if errs[i] != nil {
			failed = append(failed, errs[i])
			continue
		}
		s.rows -= len(parts[i].byOpen)
		s.bytes -= parts[i].bytes
		s.m.candles.Add(float64(len(parts[i].byOpen)))
		delete(s.buf, k)
	}
	if len(s.buf) == 0 {
		s.oldest = time.Time{}
	}
	s.m.flushes.Observe(time.Since(start).Seconds())
	s.log.Debug("s3parquet: flushed", "objects", len(keys)-len(failed), "failed", len(failed),
		"buffered", s.rows, "took", time.Since(start))
	if len(failed) > 0 {
		return fmt.Errorf("s3parquet: flush: %d of %d objects not written (their candles stay buffered): %w",
			len(failed), len(keys), errors.Join(failed[:min(len(failed), 3)]...))
	}
	return nil
}

// write is one object's first write attempt, prepared by an encoder for
// an uploader.
type write struct {
	i       int // index in the flush's keys
	k       partKey
	key     string
	p       *part
	encoded time.Duration // the time prepare took
	// e is the write cache's entry for the object, taken by prepare: the
	// PUT is If-Match its version. nil: a create (If-None-Match: *), or,
	// with data nil too, no write before reading the object.
	e     *cached
	rows  []candle.Candle // what data holds, sorted by open_time
	data  []byte          // nil: nothing to PUT without reading the object first
	stale int             // candles of p that rows does not hold (older revisions)
	err   error           // the encode failed, or ctx had ended before it
}

// prepare encodes what the object at k should hold without reading it,
// when the sink can know that: from the write cache's entry (the object as
// this sink last wrote it, with p laid over it), or, with conditional
// writes and no entry, from p's candles alone, for a create-only PUT (the
// object is new on its first flush of a day). With nothing in the cache
// and unconditional writes, or when p changes nothing in the entry (a
// redelivery, which is checked against the object itself), data stays nil
// and upsert reads the object. Once ctx has ended it encodes nothing.
func (s *Sink) prepare(ctx context.Context, i int, k partKey, p *part) *write {
	start := time.Now()
	w := &write{i: i, k: k, key: PartitionPath(k.tf, k.sym, k.day*86_400_000), p: p}
	defer func() { w.encoded = time.Since(start) }()
	if w.err = ctx.Err(); w.err != nil {
		return w
	}
	w.e = s.cache.take(w.key)
	switch {
	case w.e != nil:
		cs, changed, stale := overlay(w.e.rows, p.byOpen)
		if !changed {
			return w
		}
		w.rows, w.stale = cs, stale
	case !s.cfg.UnconditionalWrites:
		w.rows = make([]candle.Candle, 0, len(p.byOpen))
		for _, c := range p.byOpen {
			w.rows = append(w.rows, c)
		}
		sortByOpen(w.rows)
	default:
		return w
	}
	w.data, w.err = s.enc.encode(w.rows, s.cfg.RowGroupRows)
	return w
}

// upsert merges w.p into its partition's object: read it, overlay the
// buffered candles by open_time, sort, rewrite. The read is skipped when
// prepare could encode the object without it: from the write cache
// (writeCached) or, with conditional writes, as a create of a new object.
// The result depends only on the set of candles ever written, so replays
// converge to the same bytes.
//
// The rewrite is conditional on the object being what was read (If-Match
// its ETag, or If-None-Match * when it did not exist). When another writer
// replaced it meanwhile (the partition's new owner, while this instance was
// cut off with its PUT in flight), the PUT fails, and upsert reads the
// object again and merges into that: the other writer's candles are kept,
// never rolled back. After maxConflicts conflicts in a row it gives up
// with an error (the candles stay buffered and the next flush tries again).
func (s *Sink) upsert(ctx context.Context, w *write) error {
	start := time.Now()
	defer func() { s.m.latency.Observe((w.encoded + time.Since(start)).Seconds()) }()
	key, k, p := w.key, w.k, w.p
	if w.data != nil || w.err != nil {
		err := w.err
		if err == nil {
			err = s.writePrepared(ctx, w)
		}
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return stopped(ctx, key, 1, err)
		case errors.Is(err, errConflict) && w.e == nil:
			// The object exists (written before a restart, dropped from
			// the cache, or by another writer): not a fencing conflict,
			// nothing was read. Read and merge into it below.
			s.m.createRefused.Inc()
		case errors.Is(err, errConflict):
			s.m.conflicts.Inc()
			s.log.Warn("s3parquet: object changed since this sink wrote it (another writer, such as the partition's new owner, replaced it); reading and merging",
				"object", s.st.where(key), "timeframe", k.tf, "symbol", k.sym, "candles", len(p.byOpen))
		default:
			s.m.errors.Inc()
			s.log.Warn("s3parquet: write failed, reading the object and retrying", "object", s.st.where(key), "err", err)
		}
		// Fall back to reading the object: the cache entry, if any, is gone.
	}
	policy := sinkkit.Backoff{Min: s.minBackoff, Max: s.cfg.MaxBackoff}
	for conflicts := 0; ; conflicts++ {
		err := s.retry(ctx, key, func(ctx context.Context) error { return s.merge(ctx, key, p) })
		if !errors.Is(err, errConflict) || ctx.Err() != nil {
			return err
		}
		s.m.conflicts.Inc()
		if conflicts+1 >= maxConflicts {
			return fmt.Errorf("%s: %d conflicting writes in a row, giving up for this flush (the candles stay buffered): %w; "+
				"check that only one kandle deployment writes into this lake", s.st.where(key), conflicts+1, err)
		}
		pause := policy.Delay(conflicts)
		s.log.Warn("s3parquet: object changed since it was read (another writer, such as the partition's new owner, replaced it); reading and merging again",
			"object", s.st.where(key), "timeframe", k.tf, "symbol", k.sym, "conflicts", conflicts+1, "candles", len(p.byOpen), "pause", pause)
		if sinkkit.Sleep(ctx, pause) != nil {
			return stopped(ctx, key, conflicts+1, err)
		}
	}
}

// writePrepared PUTs w.data without reading the object: with w.e, on the
// condition that the object is still this sink's last write of it
// (If-Match its version), so if anyone else wrote it since, it fails with
// errConflict; without, on the condition that it does not exist
// (If-None-Match: *; the file lake checks under its lock), so if it does,
// the store refuses the write (errConflict) and writes nothing. Never
// without w.e with unconditional_writes: there this would overwrite the
// object (prepare leaves data nil).
func (s *Sink) writePrepared(ctx context.Context, w *write) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	var version, ifMatch string
	if w.e != nil {
		s.m.cacheHits.Inc()
		ifMatch = w.e.version
	}
	if err := s.st.put(withPutVersion(ctx, &version), w.key, w.data, ifMatch, w.e != nil); err != nil {
		return err
	}
	s.cache.store(w.key, version, w.rows)
	s.m.objects.Inc()
	s.m.bytes.Add(float64(len(w.data)))
	s.m.staleRevs.Add(float64(w.stale))
	return nil
}

// maxConflicts bounds the read-merge-write rounds of one object in one flush.
const maxConflicts = 8

// merge is one read-merge-write of the object at key.
func (s *Sink) merge(ctx context.Context, key string, p *part) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	old, version, found, err := s.st.get(ctx, key)
	if err != nil {
		return err
	}
	merged := make(map[int64]candle.Candle, len(p.byOpen))
	if found {
		prev, err := Decode(old)
		if err != nil {
			return fmt.Errorf("%s: %w; move or delete that object, then restart the stage", s.st.where(key), err)
		}
		for _, c := range prev {
			merged[c.OpenTime] = c
		}
	}
	stale := 0 // counted once the object is written
	for t, c := range p.byOpen {
		if prev, ok := merged[t]; ok && !replaces(&c, &prev) {
			stale++
			continue
		}
		merged[t] = c
	}
	cs := make([]candle.Candle, 0, len(merged))
	for _, c := range merged {
		cs = append(cs, c)
	}
	sortByOpen(cs)
	data, err := s.enc.encode(cs, s.cfg.RowGroupRows)
	if err != nil {
		return err
	}
	if found && string(data) == string(old) {
		s.cache.store(key, version, cs)
		s.m.staleRevs.Add(float64(stale))
		return nil // a pure redelivery: the object already says this
	}
	var written string
	if err := s.st.put(withPutVersion(ctx, &written), key, data, version, found); err != nil {
		return err
	}
	s.cache.store(key, written, cs)
	s.m.staleRevs.Add(float64(stale))
	s.m.objects.Inc()
	s.m.bytes.Add(float64(len(data)))
	return nil
}

// replaces reports whether c takes the place of old, a candle of the same
// window: unless it is an older revision (a lower rev). An equal rev is a
// newer write of the same revision, or a redelivery.
func replaces(c, old *candle.Candle) bool { return c.Rev >= old.Rev }

func sortByOpen(cs []candle.Candle) {
	slices.SortFunc(cs, func(a, b candle.Candle) int { return cmp.Compare(a.OpenTime, b.OpenTime) })
}

// candleBytes estimates the memory one buffered candle takes.
func candleBytes(c *candle.Candle) int { return 200 + len(c.Symbol) + len(c.Timeframe) }

// 10^38, the first unscaled value DECIMAL(38,18) cannot hold.
const limitHi, limitLo = 0x4B3B4CA85A86C47A, 0x098A224000000000

// maxOpenTime is 10000-01-01T00:00:00Z: the partition path has a 4-digit year.
const maxOpenTime = 253_402_300_800_000

// check returns why c can never be stored, or "".
func check(c *candle.Candle) string {
	switch {
	case c.Symbol == "":
		return "empty symbol"
	case len(c.Symbol) > 256:
		return "symbol longer than 256 bytes (S3 keys are limited to 1024 bytes)"
	case c.OpenTime < 0 || c.OpenTime >= maxOpenTime:
		return "open_time outside years 1970-9999"
	case c.CloseTime <= c.OpenTime:
		return "close_time is not after open_time"
	}
	if _, err := candle.ParseTimeframe(c.Timeframe, nil); err != nil {
		return err.Error()
	}
	limit := decimal.FromRaw(limitHi, limitLo)
	for _, d := range [...]decimal.Decimal{c.Open, c.High, c.Low, c.Close} { // volumes are text: any size
		if d.Cmp(limit) >= 0 || d.Cmp(limit.Neg()) <= 0 {
			return "value " + d.String() + " does not fit DECIMAL(38,18) (|v| < 10^20)"
		}
	}
	return ""
}
