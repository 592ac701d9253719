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

// subscribe opens a stream client on one series and reads the reply.
func (v valkeyStream) subscribe(t *testing.T, symbol, tf string) *websocket.Conn {
	t.Helper()
	c := dial(t, v.ws)
	send(t, c, fmt.Sprintf(`{"id":1,"method":"SUBSCRIBE","params":[{"symbol":%q,"timeframe":%q}]}`, symbol, tf))
	if m := recv(t, c); string(m.ID) != "1" || m.Error != nil {
		t.Fatalf("subscribe: %s", m.raw)
	}
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
	c := v.subscribe(t, "BTC/USDT", "1m")
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
