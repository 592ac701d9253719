package s3parquet

import (
	"container/list"
	"context"
	"sync"

	"github.com/kandle/kandle/candle"
)

// writeCache remembers, for the objects this sink wrote most recently, the
// version (ETag) its own last write got and the candles that write holds,
// so the next flush of such an object merges into them and writes with
// If-Match that version instead of reading the object first. The
// condition keeps it as safe as a read: if anyone else wrote the object
// since, the store refuses the write and the sink reads the object again.
// It is bounded by the estimated memory of the candles held and evicts
// the least recently written object first. Safe for concurrent use.
type writeCache struct {
	max int // bytes

	mu    sync.Mutex
	bytes int
	lru   *list.List // of *cached, most recently stored first
	byKey map[string]*list.Element
}

// cached is one object as this sink last wrote it.
type cached struct {
	key     string
	version string
	rows    []candle.Candle // sorted by open_time; never modified (overlay may append past its length once the entry is taken)
	bytes   int
}

func newWriteCache(maxBytes int) *writeCache {
	return &writeCache{max: maxBytes, lru: list.New(), byKey: map[string]*list.Element{}}
}

// take removes and returns key's entry, or nil. An upsert takes the entry
// before writing and stores a new one only after its write succeeded, so a
// failed or refused write never leaves a stale entry behind.
func (c *writeCache) take(key string) *cached {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el := c.byKey[key]
	if el == nil {
		return nil
	}
	e := c.lru.Remove(el).(*cached)
	delete(c.byKey, key)
	c.bytes -= e.bytes
	return e
}

// store remembers that key is at version and holds rows (sorted by
// open_time; the cache keeps the slice). An empty version (a store that
// returned none) or rows larger than the whole cache are not kept.
func (c *writeCache) store(key, version string, rows []candle.Candle) {
	if c == nil || version == "" {
		return
	}
	n := 0
	for i := range rows {
		n += candleBytes(&rows[i])
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el := c.byKey[key]; el != nil {
		c.bytes -= c.lru.Remove(el).(*cached).bytes
		delete(c.byKey, key)
	}
	if n > c.max {
		return
	}
	for c.bytes+n > c.max {
		old := c.lru.Remove(c.lru.Back()).(*cached)
		delete(c.byKey, old.key)
		c.bytes -= old.bytes
	}
	c.byKey[key] = c.lru.PushFront(&cached{key: key, version: version, rows: rows, bytes: n})
	c.bytes += n
}

// len is how many objects are cached (tests).
func (c *writeCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// putVersion carries, in a put's context, where the store reports the
// version the written object got (the ETag of the PUT's response); store
// wrappers pass the context through, so the interface stays one method.
type putVersionKey struct{}

func withPutVersion(ctx context.Context, v *string) context.Context {
	return context.WithValue(ctx, putVersionKey{}, v)
}

// reportPutVersion tells put's caller the version of what put just wrote.
func reportPutVersion(ctx context.Context, version string) {
	if v, ok := ctx.Value(putVersionKey{}).(*string); ok {
		*v = version
	}
}

// overlay returns rows (sorted by open_time) with cs laid over them by
// open_time, newest write winning unless it is an older revision (see
// replaces; stale counts those), and whether that changed anything.
// rows must be a taken cache entry's: when every new candle comes after
// the last row (a stream going forward, the common case), the result is
// rows with them appended, sharing rows' array (nothing else holds it
// once the entry is taken, and the rows before len(rows) stay as they are).
func overlay(rows []candle.Candle, byOpen map[int64]candle.Candle) (out []candle.Candle, changed bool, stale int) {
	add := make([]candle.Candle, 0, len(byOpen))
	for _, c := range byOpen {
		add = append(add, c)
	}
	sortByOpen(add)
	if len(add) > 0 && (len(rows) == 0 || add[0].OpenTime > rows[len(rows)-1].OpenTime) {
		return append(rows, add...), true, 0
	}
	out = make([]candle.Candle, 0, len(rows)+len(add))
	i := 0
	for j := range add {
		for i < len(rows) && rows[i].OpenTime < add[j].OpenTime {
			out = append(out, rows[i])
			i++
		}
		switch {
		case i < len(rows) && rows[i].OpenTime == add[j].OpenTime && rows[i].Equal(&add[j]):
			out = append(out, rows[i]) // a redelivery: keep the row as written
			i++
			continue
		case i < len(rows) && rows[i].OpenTime == add[j].OpenTime && !replaces(&add[j], &rows[i]):
			out = append(out, rows[i]) // an older revision: keep the newer one
			i++
			stale++
			continue
		case i < len(rows) && rows[i].OpenTime == add[j].OpenTime:
			i++ // replaced by the newer write
		}
		changed = true
		out = append(out, add[j])
	}
	return append(out, rows[i:]...), changed, stale
}
