package serve

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	vk "github.com/valkey-io/valkey-go"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/valkey"
	"github.com/kandle/kandle/internal/testkit"
)

// valkeyLive is the valkey reader as the server's OpenWindow and Feed, the
// way kandle serve wires it.
type valkeyLive struct{ r *valkey.Reader }

func (l valkeyLive) OpenCandle(ctx context.Context, symbol, tf string) (candle.Candle, bool, error) {
	return l.r.Active(ctx, symbol, tf)
}
func (l valkeyLive) Symbols(ctx context.Context) ([]string, error) { return l.r.Symbols(ctx) }
func (l valkeyLive) Subscribe(ctx context.Context, symbol, tf string) error {
	return l.r.Subscribe(ctx, symbol, tf)
}
func (l valkeyLive) Unsubscribe(ctx context.Context, symbol, tf string) error {
	return l.r.Unsubscribe(ctx, symbol, tf)
}
func (l valkeyLive) Run(ctx context.Context, fn func(Update)) error {
	return l.r.Run(ctx, func(m valkey.Message) { fn(Update{Candle: m.Candle, Final: m.Final}) })
}

// valkeyStream is a server whose live store and stream are a real
// redis-server, fed through the valkey sink (as a pipeline feeds it), with
// hot as its history store.
type valkeyStream struct {
	sink *valkey.Sink
	raw  vk.Client
	hot  *Memory
	base string // API base URL
	ws   string
}

func newValkeyStream(t *testing.T, tfs map[string]candle.Timeframe, now time.Time) valkeyStream {
	t.Helper()
	ctx := context.Background()
	rs := testkit.Redis(t)
	cfg := valkey.DefaultConfig(rs.Addr)
	sink, err := valkey.New(ctx, cfg, valkey.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = sink.Close(cctx)
	})
	r, err := valkey.NewReader(ctx, cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	raw, err := vk.NewClient(vk.ClientOption{InitAddress: []string{rs.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	hot := NewMemory(1 << 20)
	s, err := New(Options{Config: defaults(t), Timeframes: tfs, Hot: hot, Live: valkeyLive{r}, Feed: valkeyLive{r},
		Log: quiet(), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	u := start(t, s)
	return valkeyStream{sink: sink, raw: raw, hot: hot, base: u, ws: "ws" + strings.TrimPrefix(u, "http") + "/v1/stream"}
}

// live publishes c as the open candle, through the sink.
func (v valkeyStream) live(t *testing.T, c candle.Candle) {
	t.Helper()
	v.sink.Active(c)
	if err := v.sink.FlushActive(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// final stores c as final in the history store and publishes it through
// the sink, as the pipeline's sinks do.
func (v valkeyStream) final(t *testing.T, c candle.Candle) {
	t.Helper()
	v.hot.Add(c)
	if err := v.sink.Write(context.Background(), []candle.Candle{c}); err != nil {
		t.Fatal(err)
	}
	if err := v.sink.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// subscribe opens a stream client on one series and reads the reply; it
// returns once the server's subscription to the channel of stored, the
// stored timeframe that feeds it, is in place (the reader subscribes when
// its connection is up, which may be after the reply).
func (v valkeyStream) subscribe(t *testing.T, symbol, tf, stored string) *websocket.Conn {
	t.Helper()
	c := dial(t, v.ws)
	send(t, c, fmt.Sprintf(`{"id":1,"method":"SUBSCRIBE","params":[{"symbol":%q,"timeframe":%q}]}`, symbol, tf))
	if m := recv(t, c); string(m.ID) != "1" || m.Error != nil {
		t.Fatalf("subscribe: %s", m.raw)
	}
	ch := "pub:candle:" + stored + ":" + symbol
	poll(t, "the subscription to "+ch, func() bool {
		n, err := v.raw.Do(context.Background(), v.raw.B().PubsubNumsub().Channel(ch).Build()).AsIntMap()
		return err == nil && n[ch] > 0
	})
	return c
}

// TestStreamFinalAfterNextWindowOpens: in continuous trading a window's
// final is published after the next window's first update (the final
// needs the watermark to pass its close, which takes a later trade). With
// 1m candles and 2s lateness, a trade at 12:29:59.9 and one at 12:30:03
// make Valkey publish the 12:30 update and then the 12:29 final: the
// client gets both, the final with every trade. A stale update of a window
// (fewer trades than sent, or anything after its final) is still dropped.
func TestStreamFinalAfterNextWindowOpens(t *testing.T) {
	m1 := tf(t, "1m")
	t1229 := time.Date(2026, 11, 27, 12, 29, 0, 0, time.UTC)
	v := newValkeyStream(t, map[string]candle.Timeframe{"1m": m1}, t1229.Add(2*time.Minute))
	cs := series("BTC/USDT", m1, t1229.UnixMilli(), 2, 4)
	w29, w30 := cs[0], cs[1]
	w29.Trades, w30.Trades = 45, 1
	open29 := w29
	open29.Trades = 44 // before the trade at 12:29:59.9
	v.live(t, open29)
	c := v.subscribe(t, "BTC/USDT", "1m", "1m")
	if m := recv(t, c); m.OpenTime != w29.OpenTime || m.Trades != 44 || m.Final {
		t.Fatalf("snapshot: %s", m.raw)
	}
	// The trade at 12:29:59.9 and the one at 12:30:03 reach Valkey as
	// one coalesced flush: the 12:30 update, then the 12:29 final.
	v.live(t, w30)
	v.final(t, w29)
	if m := recv(t, c); m.OpenTime != w30.OpenTime || m.Trades != 1 || m.Final {
		t.Fatalf("want the 12:30 update, got %s", m.raw)
	}
	m := recv(t, c)
	if m.OpenTime != w29.OpenTime || m.Trades != 45 || !m.Final {
		t.Fatalf("want the 12:29 final with 45 trades, got %s", m.raw)
	}
	if want := string(updateJSON(nil, Update{Candle: w29, Final: true})); m.raw != want {
		t.Fatalf("12:29 final:\n got %s\nwant %s", m.raw, want)
	}
	// Stale updates, published as they come (a redelivery, a reordered
	// flush): 12:29 open with 44 trades after its final, the final again,
	// 12:30 with fewer trades than sent. Then 12:30 moves on: the next
	// message is that, so the stale ones were dropped.
	stale30 := w30
	stale30.Trades = 0
	for _, u := range []Update{{Candle: open29}, {Candle: w29, Final: true}, {Candle: stale30}} {
		ch := "pub:candle:1m:BTC/USDT"
		if err := v.raw.Do(context.Background(), v.raw.B().Publish().Channel(ch).Message(string(updateJSON(nil, u))).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	w30.Trades = 2
	v.live(t, w30)
	if m := recv(t, c); m.OpenTime != w30.OpenTime || m.Trades != 2 || m.Final {
		t.Fatalf("after stale updates: want 12:30 with 2 trades, got %s", m.raw)
	}
}

// TestStreamDerivedEqualsQuery: a timeframe built from a stored one (3m
// from 1m; 1w from Europe/Berlin days) streams bars that equal the
// candles /v1/candles builds from the same stored candles, final ones
// included, fed through the valkey sink in the order a pipeline publishes
// (each window's final after the next window's first update) and with the
// client subscribing while a window is under way.
func TestStreamDerivedEqualsQuery(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	d1, err := candle.ParseTimeframe("1d", berlin)
	if err != nil {
		t.Fatal(err)
	}
	m1 := tf(t, "1m")
	for _, tc := range []struct {
		name    string
		base    candle.Timeframe
		derived string
		start   time.Time
		n       int
		// race: publish on while the server reads its snapshot; the
		// windows before the first one sent may then be missing, every
		// one sent must still be whole.
		race bool
	}{
		{"3m from 1m", m1, "3m", time.Date(2026, 11, 27, 12, 1, 0, 0, time.UTC), 14, false},
		{"1w from Berlin days", d1, "1w", time.Date(2026, 3, 18, 0, 0, 0, 0, berlin), 19, false}, // across the DST change
		{"3m from 1m while subscribing", m1, "3m", time.Date(2026, 11, 27, 12, 1, 0, 0, time.UTC), 14, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := series("BTC/USDT", tc.base, tc.start.UnixMilli(), tc.n, 11) // every fifth a gap candle
			last := cs[len(cs)-1]
			v := newValkeyStream(t, map[string]candle.Timeframe{tc.base.String(): tc.base}, time.UnixMilli(last.CloseTime).Add(time.Hour))
			// open is a window's state before its last trade.
			open := func(c candle.Candle) candle.Candle {
				c.Trades--
				return c
			}
			// The first window (mid derived window) is under way when the
			// client subscribes; the stream then takes over.
			v.final(t, cs[0])
			v.live(t, open(cs[1]))
			c := v.subscribe(t, "BTC/USDT", tc.derived, tc.base.String())
			// The snapshot is the window under way as the API builds it
			// (its stored part and the open sub-candle).
			if !tc.race {
				snap := recv(t, c)
				code, body := get(t, fmt.Sprintf("%s/v1/candles?symbol=BTC/USDT&timeframe=%s&limit=1", v.base, tc.derived))
				if p := decode(t, body); code != 200 || len(p.Candles) != 1 || snap.raw != string(p.Candles[0]) || snap.Final {
					t.Fatalf("snapshot %s; the API has %s", snap.raw, body)
				}
			}
			for i := 1; i < len(cs); i++ {
				if i+1 < len(cs) && !cs[i+1].Gap {
					v.live(t, open(cs[i+1])) // the next window opens…
				}
				v.final(t, cs[i]) // …before this one's final arrives
			}
			// The API's answer for every derived window of the data.
			code, body := get(t, fmt.Sprintf("%s/v1/candles?symbol=BTC/USDT&timeframe=%s&start=0&limit=100", v.base, tc.derived))
			if code != 200 {
				t.Fatalf("%d %s", code, body)
			}
			want := map[int64]string{}
			var lastOpen int64
			for _, raw := range decode(t, body).Candles {
				x, err := candle.ParseJSON(raw)
				if err != nil {
					t.Fatal(err)
				}
				want[x.OpenTime] = string(raw)
				lastOpen = max(lastOpen, x.OpenTime)
			}
			if len(want) < 3 {
				t.Fatalf("only %d derived candles: %s", len(want), body)
			}
			// The stream's newest message of each window, until the last
			// window's final.
			got := map[int64]msg{}
			first := int64(maxTime)
			for {
				m := recv(t, c)
				got[m.OpenTime] = m
				first = min(first, m.OpenTime)
				if m.OpenTime == lastOpen && m.Final {
					break
				}
			}
			for o, w := range want {
				g, ok := got[o]
				if !ok && tc.race && o < first {
					continue
				}
				if !ok {
					t.Fatalf("no stream message for the window at %d; want %s", o, w)
				}
				if g.raw != w {
					t.Errorf("window at %s:\nstream %s\n   api %s", time.UnixMilli(o).UTC(), g.raw, w)
				}
			}
		})
	}
}
