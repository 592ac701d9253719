package valkey

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/kandle/kandle/candle"
	"github.com/valkey-io/valkey-go"

	"github.com/kandle/kandle/connectors/sinkkit"
)

// maxChunk is the most finals in one WATCH/MULTI/EXEC transaction. An
// aborted transaction is retried with half as many, down to one.
const maxChunk = 128

// errAborted means EXEC returned nil: a watched hash changed meanwhile.
var errAborted = errors.New("valkey: transaction aborted by a concurrent write")

// flushFinals stores s.buf chunk by chunk, retrying transient errors with
// backoff until ctx ends. Stored candles leave the buffer. Caller holds fmu.
func (s *Sink) flushFinals(ctx context.Context) error {
	var rej *RejectedError
	chunk, attempt := maxChunk, 0
	for len(s.buf) > 0 {
		n := min(chunk, len(s.buf))
		bad, err := s.storeFinals(ctx, s.buf[:n])
		if err == nil {
			for i, why := range bad {
				if why != "" {
					if rej == nil {
						rej = &RejectedError{}
					}
					rej.add(s.buf[i], why)
					s.m.rejected.Inc()
				}
			}
			s.m.written.WithLabelValues(kindFinal).Add(float64(n - countNonEmpty(bad)))
			s.buf = s.buf[:copy(s.buf, s.buf[n:])]
			chunk, attempt = min(chunk*2, maxChunk), 0
			continue
		}
		s.m.retries.WithLabelValues(kindFinal).Inc()
		if errors.Is(err, errAborted) {
			chunk = max(1, n/2)
			continue
		}
		s.m.errors.WithLabelValues(kindFinal).Inc()
		if ctx.Err() != nil {
			return fmt.Errorf("valkey: %d final candles not stored yet (they stay buffered): %w", len(s.buf), ctx.Err())
		}
		if attempt%20 == 0 {
			s.log.Warn("valkey write of final candles failed, retrying", "err", err, "attempt", attempt+1, "buffered", len(s.buf))
		}
		if sinkkit.Sleep(ctx, backoff(attempt)) != nil {
			return fmt.Errorf("valkey: %d final candles not stored yet (they stay buffered): %w", len(s.buf), ctx.Err())
		}
		attempt++
	}
	return rej.orNil()
}

func countNonEmpty(ss []string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}

// storeFinals runs one compare-and-set transaction for cs on a dedicated
// connection, in two round trips:
//
//	WATCH k1 … kn; HGET ki open_time …      (read what is stored)
//	MULTI; HSET+PEXPIRE for keys whose stored open_time ≤ the candle's;
//	SADD active:symbols …; PUBLISH … "final":true; EXEC
//
// It returns, per candle, why it was rejected ("" = stored or rightly not
// stored because the hash is newer), or errAborted / a transient error.
func (s *Sink) storeFinals(ctx context.Context, cs []candle.Candle) (bad []string, err error) {
	bad = make([]string, len(cs))
	err = s.timed(ctx, kindFinal, func(ctx context.Context) error {
		return s.client.Dedicated(func(dc valkey.DedicatedClient) error {
			b := dc.B()
			keys := make([]string, len(cs))
			read := make(valkey.Commands, 0, len(cs)+1)
			for i := range cs {
				keys[i] = s.names.hash(cs[i].Timeframe, cs[i].Symbol)
			}
			read = append(read, b.Watch().Key(keys...).Build())
			for _, k := range keys {
				read = append(read, b.Hget().Key(k).Field("open_time").Build())
			}
			rs := s.doMulti(ctx, dc, read...)
			if err := rs[0].Error(); err != nil {
				return fmt.Errorf("watch: %w", err)
			}
			// newest open_time per key: stored, then the candles in this chunk.
			newest := make(map[string]int64, len(cs))
			for i, r := range rs[1:] {
				v, err := r.ToString()
				switch {
				case valkey.IsValkeyNil(err):
				case isWrongType(err):
					bad[i] = fmt.Sprintf("key %s holds a non-hash value; delete it or set key_prefix", keys[i])
					continue
				case err != nil:
					return fmt.Errorf("read %s: %w", keys[i], err)
				default:
					if ot, perr := strconv.ParseInt(v, 10, 64); perr == nil {
						if cur, ok := newest[keys[i]]; !ok || ot > cur {
							newest[keys[i]] = ot
						}
					}
				}
			}
			for i := range cs {
				if cur, ok := newest[keys[i]]; bad[i] == "" && (!ok || cs[i].OpenTime > cur) {
					newest[keys[i]] = cs[i].OpenTime
				}
			}

			tx := make(valkey.Commands, 0, 3*len(cs)+3)
			tx = append(tx, b.Multi().Build())
			var syms []string
			seen := make(map[string]bool)
			written := make(map[string]bool)
			var msg []byte
			stale := 0
			for i := range cs {
				if bad[i] != "" {
					continue
				}
				c := &cs[i]
				if c.OpenTime == newest[keys[i]] && !written[keys[i]] {
					written[keys[i]] = true
					tx = append(tx, hset(b, keys[i], c), b.Pexpire().Key(keys[i]).Milliseconds(ttl(s.ttlMs, c)).Build())
				} else {
					stale++
				}
				msg = message(msg, c, true)
				tx = append(tx, b.Publish().Channel(s.names.channel(c.Timeframe, c.Symbol)).Message(string(msg)).Build())
				if !seen[c.Symbol] {
					seen[c.Symbol] = true
					syms = append(syms, c.Symbol)
				}
			}
			if len(syms) > 0 {
				tx = append(tx, b.Sadd().Key(s.names.symbols()).Member(syms...).Build())
			}
			tx = append(tx, b.Exec().Build())
			if s.beforeExec != nil {
				s.beforeExec()
			}
			rs = s.doMulti(ctx, dc, tx...)
			for _, r := range rs[:len(rs)-1] {
				if err := r.Error(); err != nil {
					return fmt.Errorf("queue transaction: %w", err)
				}
			}
			replies, err := rs[len(rs)-1].ToArray()
			if valkey.IsValkeyNil(err) {
				return errAborted
			}
			if err != nil {
				return fmt.Errorf("exec: %w", err)
			}
			for _, r := range replies {
				if err := r.Error(); err != nil {
					return fmt.Errorf("exec: %w", err)
				}
			}
			s.m.stale.Add(float64(stale))
			return nil
		})
	})
	if err != nil && !errors.Is(err, errAborted) {
		err = fmt.Errorf("valkey: store %d final candles: %w", len(cs), err)
	}
	return bad, err
}

func isWrongType(err error) bool {
	ve, ok := valkey.IsValkeyErr(err)
	return ok && strings.HasPrefix(ve.Error(), "WRONGTYPE")
}
