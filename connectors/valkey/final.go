package valkey

import (
	"context"
	"crypto/sha1" //nolint:gosec // Valkey names scripts by their SHA-1
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/sinkkit"
)

// Finals are stored by finalScript, one EVALSHA per chunk of at most
// maxChunk candles, with up to finalsInFlight chunks in flight at once.
const (
	maxChunk       = 128
	finalsInFlight = 4
)

// finalArgs is the number of ARGV entries per candle of finalScript.
const finalArgs = 19

// revGuardTTL is how long at least (the hash's expiry when longer) a
// window's revision guard (names.revision) lives after its last revision
// was stored: an older revision of the window redelivered within it is
// refused even when the hash has moved on.
const revGuardTTL = 24 * time.Hour

// finalScript stores a chunk of final candles with a compare-and-set, in
// order, atomically (Valkey runs a script as one command):
//
//	KEYS[1]      the active:symbols set
//	KEYS[2i]     the hash of candle i
//	KEYS[2i+1]   the revision guard of candle i's window
//	ARGV         per candle: open_time close_time o h l c v q t ttl_ms
//	             channel message symbol tb tq fid lid rev guard_ttl_ms
//	             (see finalArgsOf)
//
// A candle whose rev is below the newest known rev of its window (the
// hash's rev when it holds that window, else the window's guard) is stale:
// neither stored nor published, counted in stale_revs. Otherwise a hash
// whose stored open_time is newer than the candle's keeps its value (the
// candle is counted stale); else it gets the candle's fields and expiry. A
// candle with rev > 0 sets its window's guard. Every candle that is not a
// stale rev is published. A key that holds another type fails only its
// own candle (not published, its position returned). It returns {stale,
// symbols set ok (1/0), stale revs, positions of wrong-type keys...}.
//
// open_time is compared as a Lua number (a double): exact for millisecond
// times below 2^53 (the year 287,396).
const finalScript = `
local stale, symsOK, staleRevs, bad, syms = 0, 1, 0, {}, {}
for i = 1, (#KEYS - 1) / 2 do
  local k, g, a = KEYS[2 * i], KEYS[2 * i + 1], (i - 1) * 19
  local cur = redis.pcall('HMGET', k, 'open_time', 'rev')
  if cur.err then
    bad[#bad + 1] = i
  else
    local open, rev = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 18])
    local stored = cur[1] and tonumber(cur[1])
    local known = tonumber(redis.call('GET', g) or '0') or 0
    if stored == open then known = math.max(known, tonumber(cur[2] or '0') or 0) end
    if rev < known then
      staleRevs = staleRevs + 1
    else
      if not stored or stored <= open then
        redis.call('HSET', k, 'o', ARGV[a + 3], 'h', ARGV[a + 4], 'l', ARGV[a + 5], 'c', ARGV[a + 6],
          'v', ARGV[a + 7], 'q', ARGV[a + 8], 't', ARGV[a + 9], 'open_time', ARGV[a + 1], 'close_time', ARGV[a + 2],
          'tb', ARGV[a + 14], 'tq', ARGV[a + 15], 'fid', ARGV[a + 16], 'lid', ARGV[a + 17], 'rev', ARGV[a + 18])
        redis.call('PEXPIRE', k, ARGV[a + 10])
      else
        stale = stale + 1
      end
      if rev > 0 then
        redis.call('SET', g, ARGV[a + 18], 'PX', ARGV[a + 19])
      end
      redis.call('PUBLISH', ARGV[a + 11], ARGV[a + 12])
      syms[#syms + 1] = ARGV[a + 13]
    end
  end
end
for i = 1, #syms, 1000 do -- unpack takes at most ~8000 values
  local r = redis.pcall('SADD', KEYS[1], unpack(syms, i, math.min(i + 999, #syms)))
  if type(r) == 'table' and r.err then symsOK = 0 end
end
local out = {stale, symsOK, staleRevs}
for _, i in ipairs(bad) do out[#out + 1] = i end
return out
`

// finalArgsOf appends the finalArgs ARGV entries of c for finalScript.
func finalArgsOf(args []string, c *candle.Candle, ttlMs int64, channel string, msg []byte) []string {
	tb, tq, fid, lid := tradeFields(c)
	return append(args, strconv.FormatInt(c.OpenTime, 10), strconv.FormatInt(c.CloseTime, 10),
		c.Open.String(), c.High.String(), c.Low.String(), c.Close.String(),
		c.Volume.String(), c.QuoteVolume.String(), strconv.FormatInt(c.Trades, 10),
		strconv.FormatInt(ttlMs, 10), channel, string(msg), c.Symbol, tb, tq, fid, lid,
		strconv.FormatUint(uint64(c.Rev), 10), strconv.FormatInt(max(ttlMs, revGuardTTL.Milliseconds()), 10))
}

var finalScriptSHA = func() string {
	h := sha1.Sum([]byte(finalScript)) //nolint:gosec // the script's name, not a secret
	return hex.EncodeToString(h[:])
}()

// finalChunk is a run of s.buf stored by one script call: at (positions in
// s.buf, in buffer order) and what came back.
type finalChunk struct {
	at     []int
	keys   []string
	args   []string
	stale  int
	revs   int   // stale revisions: neither stored nor published
	bad    []int // positions in at of wrong-type keys
	symsOK bool
	err    error
}

// flushFinals stores s.buf, retrying transient errors with backoff until
// ctx ends. Stored candles leave the buffer. Caller holds fmu.
//
// Each attempt first orders the live path before the finals (liveFirst).
//
// The buffer is cut into chunks so that all candles of one key are in the
// same chunk, in buffer order: the chunks in flight at once share no key,
// so the order in which Valkey runs them does not matter, and a key's
// finals are published in the order they were written.
func (s *Sink) flushFinals(ctx context.Context) error {
	var rej *RejectedError
	for attempt := 0; len(s.buf) > 0; attempt++ {
		// The live updates of these keys go first (or are dropped when a
		// final supersedes them): none is published after its final.
		var chunks []*finalChunk
		err := s.liveFirst(ctx)
		if err == nil {
			chunks = s.chunkFinals()
			s.sendFinals(ctx, chunks)
		}
		var keep []bool // the candles of failed chunks stay buffered
		for _, ch := range chunks {
			if ch.err != nil {
				if keep == nil {
					keep = make([]bool, len(s.buf))
				}
				for _, i := range ch.at {
					keep[i] = true
				}
				if err == nil {
					err = ch.err
				}
				continue
			}
			for _, j := range ch.bad {
				if rej == nil {
					rej = &RejectedError{}
				}
				c := &s.buf[ch.at[j]]
				rej.add(*c, fmt.Sprintf("key %s holds a non-hash value; delete it or set key_prefix", s.names.hash(c.Timeframe, c.Symbol)))
				s.m.rejected.Inc()
			}
			if !ch.symsOK {
				s.log.Warn("valkey: the symbols set holds another type; remove or rename that key", "key", s.names.symbols())
			}
			s.m.written.WithLabelValues(kindFinal).Add(float64(len(ch.at) - len(ch.bad) - ch.revs))
			s.m.stale.Add(float64(ch.stale))
			s.m.staleRevs.Add(float64(ch.revs))
		}
		if chunks != nil { // else nothing was sent: all stay buffered
			n := 0
			for i := range keep {
				if keep[i] {
					s.buf[n] = s.buf[i]
					n++
				}
			}
			clear(s.buf[n:])
			s.buf = s.buf[:n]
		}
		if err == nil {
			break
		}
		s.m.retries.WithLabelValues(kindFinal).Inc()
		if chunks != nil { // a failed live flush is counted as kind active
			s.m.errors.WithLabelValues(kindFinal).Inc()
		}
		if ctx.Err() != nil {
			return fmt.Errorf("valkey: %d final candles not stored yet (they stay buffered): %w", len(s.buf), ctx.Err())
		}
		if attempt%20 == 0 {
			s.log.Warn("valkey write of final candles failed, retrying", "err", err, "attempt", attempt+1, "buffered", len(s.buf))
		}
		if sinkkit.Sleep(ctx, backoff(attempt)) != nil {
			return fmt.Errorf("valkey: %d final candles not stored yet (they stay buffered): %w", len(s.buf), ctx.Err())
		}
	}
	return rej.orNil()
}

// chunkFinals cuts s.buf into chunks of about maxChunk candles, all candles
// of a key in the chunk of its first one. Caller holds fmu.
func (s *Sink) chunkFinals() []*finalChunk {
	chunks := make([]*finalChunk, 0, len(s.buf)/maxChunk+1)
	of := make(map[key]*finalChunk, len(s.buf))
	var open *finalChunk
	for i := range s.buf {
		k := keyOf(&s.buf[i])
		ch := of[k]
		if ch == nil {
			if open == nil || len(open.at) >= maxChunk {
				open = &finalChunk{at: make([]int, 0, maxChunk)}
				chunks = append(chunks, open)
			}
			ch = open
			of[k] = ch
		}
		ch.at = append(ch.at, i)
	}
	return chunks
}

// sendFinals runs the chunks, at most finalsInFlight at once, and waits
// for all of them. Caller holds fmu (the goroutines only read s.buf).
func (s *Sink) sendFinals(ctx context.Context, chunks []*finalChunk) {
	next := make(chan *finalChunk)
	var wg sync.WaitGroup
	for range min(finalsInFlight, len(chunks)) {
		wg.Go(func() {
			var msg []byte
			for ch := range next {
				msg = s.storeFinals(ctx, ch, msg)
			}
		})
	}
	for _, ch := range chunks {
		next <- ch
	}
	close(next)
	wg.Wait()
}

// storeFinals runs finalScript for one chunk (one round trip; a second
// one, EVAL with the script's text, only if the server does not know the
// script yet) and fills in ch's result. msg is a reusable buffer.
func (s *Sink) storeFinals(ctx context.Context, ch *finalChunk, msg []byte) []byte {
	ch.keys = append(make([]string, 0, 1+2*len(ch.at)), s.names.symbols())
	ch.args = make([]string, 0, finalArgs*len(ch.at))
	for _, i := range ch.at {
		c := &s.buf[i]
		msg = message(msg, c, true)
		ch.keys = append(ch.keys, s.names.hash(c.Timeframe, c.Symbol), s.names.revision(c))
		ch.args = finalArgsOf(ch.args, c, ttl(s.ttlMs, c), s.names.channel(c.Timeframe, c.Symbol), msg)
	}
	var reply []valkey.ValkeyMessage
	ch.err = s.timed(ctx, kindFinal, func(ctx context.Context) error {
		b := s.client.B()
		r := s.do(ctx, b.Evalsha().Sha1(finalScriptSHA).Numkeys(int64(len(ch.keys))).Key(ch.keys...).Arg(ch.args...).Build())
		if ve, ok := valkey.IsValkeyErr(r.Error()); ok && ve.IsNoScript() {
			r = s.do(ctx, b.Eval().Script(finalScript).Numkeys(int64(len(ch.keys))).Key(ch.keys...).Arg(ch.args...).Build())
		}
		var err error
		reply, err = r.ToArray()
		return err
	})
	if ch.err == nil {
		ch.err = ch.parse(reply)
	}
	if ch.err != nil {
		ch.err = fmt.Errorf("valkey: store %d final candles: %w", len(ch.at), ch.err)
	}
	return msg
}

// parse reads finalScript's reply {stale, symbols ok, stale revs, bad
// positions...}.
func (ch *finalChunk) parse(reply []valkey.ValkeyMessage) error {
	if len(reply) < 3 {
		return fmt.Errorf("script replied %d values, want at least 3", len(reply))
	}
	ints := make([]int64, len(reply))
	for i := range reply {
		v, err := reply[i].AsInt64()
		if err != nil {
			return fmt.Errorf("script reply %d: %w", i, err)
		}
		ints[i] = v
	}
	ch.stale, ch.symsOK, ch.revs, ch.bad = int(ints[0]), ints[1] == 1, int(ints[2]), ch.bad[:0]
	for _, p := range ints[3:] {
		if p < 1 || int(p) > len(ch.at) {
			return fmt.Errorf("script reply: position %d out of range", p)
		}
		ch.bad = append(ch.bad, int(p)-1)
	}
	return nil
}

// do sends one command and counts the round trip and the requests in flight.
func (s *Sink) do(ctx context.Context, cmd valkey.Completed) valkey.ValkeyResult {
	s.trips.Add(1)
	s.m.roundTrips.Inc()
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for peak := s.peakInFlight.Load(); n > peak && !s.peakInFlight.CompareAndSwap(peak, n); peak = s.peakInFlight.Load() {
	}
	return s.client.Do(ctx, cmd)
}

func isWrongType(err error) bool {
	ve, ok := valkey.IsValkeyErr(err)
	return ok && strings.HasPrefix(ve.Error(), "WRONGTYPE")
}
