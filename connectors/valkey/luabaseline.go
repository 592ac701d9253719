package valkey

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/kandle/kandle/candle"
	"github.com/valkey-io/valkey-go"
)

// LuaBaseline is the per-trade serverless design, kept only so benchmarks and
// tests can measure kandle against it: one EVALSHA per trade that updates the
// active candle hash and publishes it. Its arithmetic is Lua doubles, NOT
// exact decimals; do not use it for anything but comparison.
type LuaBaseline struct {
	client valkey.Client
	names  names
	ttlMs  int64
	sha    string
	trips  atomic.Int64
}

// luaTrade updates candle:active for one trade (KEYS[1] hash, KEYS[2]
// active:symbols; ARGV symbol tf open_time close_time price qty ttl_ms channel).
const luaTrade = `
local k = KEYS[1]
local p, q = tonumber(ARGV[5]), tonumber(ARGV[6])
local cur = redis.call('HMGET', k, 'open_time', 'o', 'h', 'l', 'v', 'q', 't')
local o, h, l, v, qv, t
if cur[1] == ARGV[3] then
  o = cur[2]
  h = math.max(tonumber(cur[3]), p)
  l = math.min(tonumber(cur[4]), p)
  v = tonumber(cur[5]) + q
  qv = tonumber(cur[6]) + p * q
  t = tonumber(cur[7]) + 1
else
  o, h, l, v, qv, t = ARGV[5], p, p, q, p * q, 1
end
h, l, v, qv, t = tostring(h), tostring(l), tostring(v), tostring(qv), tostring(t)
redis.call('HSET', k, 'o', o, 'h', h, 'l', l, 'c', ARGV[5], 'v', v, 'q', qv, 't', t,
  'open_time', ARGV[3], 'close_time', ARGV[4])
redis.call('PEXPIRE', k, ARGV[7])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('PUBLISH', ARGV[8], '{"symbol":' .. cjson.encode(ARGV[1]) .. ',"timeframe":"' .. ARGV[2] ..
  '","open_time":' .. ARGV[3] .. ',"close_time":' .. ARGV[4] .. ',"open":"' .. o .. '","high":"' .. h ..
  '","low":"' .. l .. '","close":"' .. ARGV[5] .. '","volume":"' .. v .. '","quote_volume":"' .. qv ..
  '","trades":' .. t .. ',"gap":false,"final":false}')
return t
`

// NewLuaBaseline connects with cfg (addrs, auth, key_prefix, active_ttl) and
// loads the script.
func NewLuaBaseline(ctx context.Context, cfg Config) (*LuaBaseline, error) {
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("valkey: invalid config: %s", strings.Join(errs, "; "))
	}
	client, err := newClient(ctx, &cfg, nil)
	if err != nil {
		return nil, err
	}
	l := &LuaBaseline{client: client, names: names{cfg.KeyPrefix}, ttlMs: cfg.ActiveTTL.Milliseconds()}
	if err := l.load(ctx); err != nil {
		client.Close()
		return nil, err
	}
	return l, nil
}

func (l *LuaBaseline) load(ctx context.Context) error {
	sha, err := l.client.Do(ctx, l.client.B().ScriptLoad().Script(luaTrade).Build()).ToString()
	if err != nil {
		return fmt.Errorf("valkey: load baseline script: %w", err)
	}
	l.sha = sha
	return nil
}

// Trade applies one trade to its tf candle with one EVALSHA round trip.
func (l *LuaBaseline) Trade(ctx context.Context, tr candle.Trade, tf candle.Timeframe) error {
	open := tf.Start(tr.TS)
	closeTime := tf.End(open)
	c := candle.Candle{OpenTime: open, CloseTime: closeTime}
	tfs := tf.String()
	cmd := l.client.B().Evalsha().Sha1(l.sha).Numkeys(2).
		Key(l.names.hash(tfs, tr.Key), l.names.symbols()).
		Arg(tr.Key, tfs, strconv.FormatInt(open, 10), strconv.FormatInt(closeTime, 10),
			tr.Price.String(), tr.Qty.String(), strconv.FormatInt(ttl(l.ttlMs, &c), 10),
			l.names.channel(tfs, tr.Key)).Build()
	l.trips.Add(1)
	err := l.client.Do(ctx, cmd).Error()
	if ve, ok := valkey.IsValkeyErr(err); ok && ve.IsNoScript() {
		if err := l.load(ctx); err != nil {
			return err
		}
		return l.Trade(ctx, tr, tf)
	}
	if err != nil {
		return fmt.Errorf("valkey: baseline EVALSHA: %w", err)
	}
	return nil
}

// RoundTrips returns how many EVALSHA calls were sent (one per trade).
func (l *LuaBaseline) RoundTrips() int64 { return l.trips.Load() }

// Close closes the connection.
func (l *LuaBaseline) Close() { l.client.Close() }
