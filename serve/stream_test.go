package serve

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kandle/kandle/candle"
)

type streamFixture struct {
	s   *Server
	mem *Memory
	url string
	reg *prometheus.Registry
	m1  candle.Timeframe
}

func newStream(t *testing.T, mutate func(*Options)) streamFixture {
	t.Helper()
	mem := NewMemory(100)
	m1 := tf(t, "1m")
	reg := prometheus.NewRegistry()
	o := Options{Config: defaults(t), Timeframes: map[string]candle.Timeframe{"1m": m1},
		Hot: mem, Live: mem, Feed: mem, Log: quiet(), Registerer: reg}
	if mutate != nil {
		mutate(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	u := start(t, s)
	return streamFixture{s: s, mem: mem, url: "ws" + strings.TrimPrefix(u, "http") + "/v1/stream", reg: reg, m1: m1}
}

func dial(t testing.TB, url string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func send(t testing.TB, c *websocket.Conn, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
}

// msg is any server message.
type msg struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
	} `json:"error"`
	Symbol   string `json:"symbol"`
	OpenTime int64  `json:"open_time"`
	Trades   int64  `json:"trades"`
	Final    bool   `json:"final"`
	raw      string
}

func recv(t testing.TB, c *websocket.Conn) msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var m msg
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	m.raw = string(b)
	return m
}

const subBTC = `{"id":1,"method":"SUBSCRIBE","params":[{"symbol":"BTC/USDT","timeframe":"1m"}]}`

// TestStreamSnapshotThenForwardOnly: a subscription is answered with its
// id, starts with the open candle and then each window only moves
// forward: an older state of a window, an update after its final or its
// final again is never sent.
func TestStreamSnapshotThenForwardOnly(t *testing.T) {
	f := newStream(t, nil)
	cs := series("BTC/USDT", f.m1, time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC).UnixMilli(), 4, 9)
	for i := range cs {
		cs[i].Trades, cs[i].Gap = 5, false
	}
	f.mem.Active(cs[1]) // the open window
	c := dial(t, f.url)
	send(t, c, subBTC)
	if m := recv(t, c); string(m.ID) != "1" || string(m.Result) != "null" {
		t.Fatalf("reply: %s", m.raw)
	}
	if m := recv(t, c); m.OpenTime != cs[1].OpenTime || m.Final || m.raw != string(updateJSON(nil, Update{Candle: cs[1]})) {
		t.Fatalf("snapshot: %s", m.raw)
	}
	older := cs[1]
	older.Trades = 4
	f.mem.Active(older) // fewer trades: an older state of the same window
	newer := cs[1]
	newer.Trades = 6
	f.mem.Active(newer)
	f.mem.Add(newer)    // its final
	f.mem.Active(older) // after the final: dropped
	f.mem.Add(newer)    // the final again (redelivered): dropped
	f.mem.Active(cs[2])
	// Updates of one window may be coalesced (the writer may not have
	// sent the first before the next arrives), but whatever arrives moves
	// forward: never fewer trades, never an open state after the final,
	// never a second final.
	var got []msg
	for len(got) == 0 || got[len(got)-1].OpenTime != cs[2].OpenTime {
		got = append(got, recv(t, c))
	}
	sawFinal := false
	for _, m := range got {
		switch {
		case m.OpenTime == cs[1].OpenTime && m.Trades != 6:
			t.Fatalf("an older state of the open window was sent: %s", m.raw)
		case m.OpenTime == cs[1].OpenTime && sawFinal:
			t.Fatalf("an update after the final: %s", m.raw)
		}
		sawFinal = sawFinal || (m.OpenTime == cs[1].OpenTime && m.Final)
	}
	if !sawFinal {
		t.Fatalf("the final of the open window was not sent: %v", got)
	}
	// LIST_SUBSCRIPTIONS and UNSUBSCRIBE answer with the id.
	send(t, c, `{"id":"x","method":"LIST_SUBSCRIPTIONS"}`)
	if m := recv(t, c); string(m.ID) != `"x"` || string(m.Result) != `[{"symbol":"BTC/USDT","timeframe":"1m"}]` {
		t.Fatalf("list: %s", m.raw)
	}
	send(t, c, `{"id":2,"method":"UNSUBSCRIBE","params":[{"symbol":"BTC/USDT","timeframe":"1m"}]}`)
	if m := recv(t, c); string(m.ID) != "2" || m.Error != nil {
		t.Fatalf("unsubscribe: %s", m.raw)
	}
	poll(t, "no channel left", func() bool { return f.s.hub.channels() == 0 })
}

// TestOneSubscriptionPerChannel: many clients on one series share one
// feed subscription, and every one of them gets every update.
func TestOneSubscriptionPerChannel(t *testing.T) {
	// Short HTTP timeouts: they must not end streams (only API requests).
	// A second, not less: a client starved of CPU must still get its
	// handshake request in within the read timeout (at 100ms, under load,
	// the server closed connections before the request arrived).
	f := newStream(t, func(o *Options) {
		o.Config.ReadTimeout, o.Config.WriteTimeout = time.Second, time.Second
	})
	cs := series("BTC/USDT", f.m1, time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC).UnixMilli(), 3, 9)
	f.mem.Active(cs[0])
	var conns []*websocket.Conn
	for i := 0; i < 50; i++ {
		c := dial(t, f.url)
		send(t, c, subBTC)
		recv(t, c) // reply
		recv(t, c) // snapshot
		conns = append(conns, c)
	}
	if n := f.s.hub.channels(); n != 1 {
		t.Fatalf("%d channels for one series", n)
	}
	f.mem.mu.Lock()
	subs := len(f.mem.subs)
	f.mem.mu.Unlock()
	if subs != 1 {
		t.Fatalf("feed holds %d subscriptions", subs)
	}
	time.Sleep(1300 * time.Millisecond) // past both HTTP timeouts
	f.mem.Active(cs[1])
	for i, c := range conns {
		if m := recv(t, c); m.OpenTime != cs[1].OpenTime {
			t.Fatalf("client %d: %s", i, m.raw)
		}
	}
	for _, c := range conns {
		c.Close(websocket.StatusNormalClosure, "")
	}
	poll(t, "subscription released", func() bool {
		f.mem.mu.Lock()
		defer f.mem.mu.Unlock()
		return len(f.mem.subs) == 0 && f.s.hub.channels() == 0
	})
}

// TestSlowClientDisconnected: a client that stops reading is cut off once
// its queue overflows; a client on the same series that reads gets every
// window, in order, and is never slowed.
func TestSlowClientDisconnected(t *testing.T) {
	f := newStream(t, func(o *Options) { o.Config.ClientQueue = 64; o.Config.WriteWait = time.Second })
	const n = 200_000
	cs := series("BTC/USDT", f.m1, 0, n, 1)
	f.mem.Active(cs[0])
	cs = cs[1:]
	slow := dial(t, f.url)
	send(t, slow, subBTC)
	if m := recv(t, slow); m.Error != nil { // the reply; then it never reads again
		t.Fatal(m.raw)
	}
	fast := dial(t, f.url)
	send(t, fast, subBTC)
	recv(t, fast) // reply
	recv(t, fast) // snapshot
	progress := make(chan int, 1)
	var got []int64
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(progress)
		for len(got) < len(cs) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, b, err := fast.Read(ctx)
			cancel()
			if err != nil {
				t.Errorf("fast client: %v after %d updates (slow disconnects %v)", err, len(got), testutil.ToFloat64(f.s.m.dropped.WithLabelValues("slow")))
				return
			}
			var m msg
			if err := json.Unmarshal(b, &m); err != nil {
				t.Errorf("%v: %s", err, b)
				return
			}
			got = append(got, m.OpenTime)
			select {
			case <-progress:
			default:
			}
			progress <- len(got)
		}
	})
	received := 0
	for i := range cs {
		cs[i].Trades = 1
		f.mem.Active(cs[i])
		// The fast client keeps up: never more than half its queue behind.
		for i+1-received > 32 {
			r, ok := <-progress
			if !ok {
				t.FailNow()
			}
			received = r
		}
	}
	wg.Wait()
	if v := testutil.ToFloat64(f.s.m.dropped.WithLabelValues("slow")); v != 1 {
		t.Fatalf("slow disconnects: %v, want 1 (the client that stopped reading)", v)
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("fast client went back in time at %d", i)
		}
	}
}

// TestStreamWriteWait: a client that stops reading, with a queue too large
// to overflow first, is cut off once one write has waited write_wait (the
// socket buffers full), and the fan-out goes on meanwhile.
func TestStreamWriteWait(t *testing.T) {
	f := newStream(t, func(o *Options) { o.Config.ClientQueue = 1 << 20; o.Config.WriteWait = 200 * time.Millisecond })
	const n = 400_000
	cs := series("BTC/USDT", f.m1, 0, n, 1)
	f.mem.Active(cs[0])
	c := dial(t, f.url)
	send(t, c, subBTC)
	if m := recv(t, c); m.Error != nil { // the reply; then it never reads again
		t.Fatal(m.raw)
	}
	written := func() float64 { return testutil.ToFloat64(f.s.m.dropped.WithLabelValues("write")) }
	deadline := time.Now().Add(30 * time.Second)
	for i := 1; written() == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("not disconnected after %d updates in 30 s (queue-full disconnects %v)", i, testutil.ToFloat64(f.s.m.dropped.WithLabelValues("slow")))
		}
		if i < n {
			f.mem.Active(cs[i]) // never blocks, whatever the client does
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if v := testutil.ToFloat64(f.s.m.dropped.WithLabelValues("slow")); v != 0 {
		t.Fatalf("queue-full disconnects %v, want 0", v)
	}
}

// TestCoalescing: updates of one candle that queue up behind a busy
// client are merged into its newest state.
func TestCoalescing(t *testing.T) {
	f := newStream(t, nil)
	cs := series("BTC/USDT", f.m1, 0, 1, 1)
	cl := newClient(f.s.hub, nil, nil)
	k := key{"BTC/USDT", "1m"}
	cl.subs[k] = new(marks)
	for tr := int64(1); tr <= 10; tr++ {
		c := cs[0]
		c.Trades = tr
		cl.push(k, newFrame(Update{Candle: c}))
	}
	q := cl.take(nil)
	if len(q) != 1 || q[0].f.u.Candle.Trades != 10 {
		t.Fatalf("queue holds %d entries, newest trades %d; want 1 with 10", len(q), q[0].f.u.Candle.Trades)
	}
	if v := testutil.ToFloat64(f.s.m.coalesced); v != 9 {
		t.Fatalf("coalesced %v, want 9", v)
	}
}

// TestStreamBadInput: bad requests get error replies with the id; an
// oversized message closes with 1009; a client that does not answer pings
// is dropped.
func TestStreamBadInput(t *testing.T) {
	f := newStream(t, func(o *Options) {
		o.Config.MaxSubscriptions = 2
		o.Config.MaxMessageBytes = 512
		o.Symbols = []string{"BTC/USDT", "A", "B", "C"}
	})
	c := dial(t, f.url)
	for _, tc := range []struct{ req, want string }{
		{`not json`, "not a request"},
		{`{"id":3,"method":"SUBSCRIBE"}`, "params"},
		{`{"id":4,"method":"FLY"}`, "use SUBSCRIBE"},
		{`{"id":5,"method":"SUBSCRIBE","params":[{"symbol":"NOPE","timeframe":"1m"}]}`, "unknown symbol"},
		{`{"id":6,"method":"SUBSCRIBE","params":[{"symbol":"A","timeframe":"90s"}]}`, "not served"},
		{`{"id":7,"method":"SUBSCRIBE","params":[{"symbol":"A","timeframe":"1m"},{"symbol":"B","timeframe":"1m"},{"symbol":"C","timeframe":"1m"}]}`, "too many subscriptions"},
	} {
		send(t, c, tc.req)
		m := recv(t, c)
		if m.Error == nil || !strings.Contains(m.Error.Msg, tc.want) || m.Error.Code < 400 || m.Error.Code > 499 {
			t.Errorf("%s: %s", tc.req, m.raw)
		}
	}
	send(t, c, `{"id":8,"method":"SUBSCRIBE","params":[{"symbol":"`+strings.Repeat("x", 600)+`","timeframe":"1m"}]}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err := c.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("oversized message: %v", err)
	}

	p := newStream(t, func(o *Options) { o.Config.PingInterval = 50 * time.Millisecond })
	mute := dial(t, p.url) // never reads, so never answers a ping
	_ = mute
	poll(t, "the mute client dropped", func() bool { return testutil.ToFloat64(p.s.m.dropped.WithLabelValues("ping")) == 1 })
}

// TestMarksPerWindow: a client's marks keep order per window, for the last
// markWindows windows of a series: a window's final after the next window
// opened goes out; fewer trades, anything after a final, and a window
// older than every one remembered do not.
func TestMarksPerWindow(t *testing.T) {
	cs := series("BTC/USDT", tf(t, "1m"), 0, 8, 3)
	up := func(i int, trades int64, final bool) Update {
		c := cs[i]
		c.Trades = trades
		return Update{Candle: c, Final: final}
	}
	var ms marks
	for n, tc := range []struct {
		u    Update
		want bool
	}{
		{up(0, 5, false), true},
		{up(1, 1, false), true},  // the next window opens…
		{up(0, 6, true), true},   // …then the previous one's final arrives
		{up(0, 6, false), false}, // after the final
		{up(0, 6, true), false},  // the final again
		{up(1, 0, false), false}, // fewer trades than sent
		{up(1, 1, false), true},  // as many: the same state again
		{up(2, 1, false), true},
		{up(3, 1, false), true},
		{up(4, 1, false), true},  // window 0 is forgotten
		{up(0, 9, false), false}, // older than every window remembered
		{up(1, 2, true), true},   // still remembered
	} {
		if _, got := ms.admit(&tc.u); got != tc.want {
			t.Fatalf("step %d (window %d, %d trades, final %v): admitted %v", n, tc.u.Candle.OpenTime, tc.u.Candle.Trades, tc.u.Final, got)
		}
		if len(ms.recent) > markWindows {
			t.Fatalf("%d marks kept", len(ms.recent))
		}
	}
}

// TestDerivedSeries: a derived series folds the sub-candles of each window
// in the order the pipeline publishes them (a window's final after the
// next window's first update, a gap candle's final after the next
// window's update) into the candle combine builds from all of them, final
// once the whole window's finals are in; it sends nothing before it is
// seeded, and a window whose first sub-candles it never got is not final.
func TestDerivedSeries(t *testing.T) {
	m1, m3 := tf(t, "1m"), tf(t, "3m")
	cs := series("BTC/USDT", m1, 0, 9, 5)
	// cs[3], the first of window 1, is a gap candle and cs[4] is not: that
	// window opens with cs[4]'s update, before cs[3]'s final.
	px := cs[2].Close
	cs[3], cs[4] = cs[4], cs[1]
	cs[3].Open, cs[3].High, cs[3].Low, cs[3].Close = px, px, px, px
	cs[3].OpenTime, cs[3].CloseTime = cs[2].CloseTime, cs[2].CloseTime+60_000
	cs[4].OpenTime, cs[4].CloseTime = cs[3].CloseTime, cs[3].CloseTime+60_000
	d := &derivedSeries{tf: m3}
	live := func(c candle.Candle) Update { c.Trades--; return Update{Candle: c} }
	if _, ok := d.add(live(cs[0])); ok {
		t.Fatal("an unseeded series sent an update")
	}
	d.seeded = true
	last := map[int64]Update{}
	for i := range cs {
		var seq []Update
		if !cs[i].Gap {
			seq = append(seq, live(cs[i]))
		}
		if i > 0 {
			seq = append(seq, Update{Candle: cs[i-1], Final: true})
		}
		for _, u := range seq {
			if got, ok := d.add(u); ok {
				if prev, had := last[got.Candle.OpenTime]; had && prev.Final {
					t.Fatalf("an update after the final of %d", got.Candle.OpenTime)
				}
				last[got.Candle.OpenTime] = got
			}
		}
	}
	if _, ok := d.add(Update{Candle: cs[len(cs)-1], Final: true}); !ok {
		t.Fatal("the last final changed nothing")
	}
	got := d.wins[len(d.wins)-1].update()
	last[got.Candle.OpenTime] = got
	want := combine(cs, m3)
	if len(last) != len(want) {
		t.Fatalf("%d windows, want %d", len(last), len(want))
	}
	for _, w := range want {
		g := last[w.OpenTime]
		if !g.Final || !g.Candle.Equal(&w) {
			t.Fatalf("window %d: got %+v (final %v), want %+v", w.OpenTime, g.Candle, g.Final, w)
		}
	}
	if len(d.wins) > markWindows {
		t.Fatalf("%d windows kept", len(d.wins))
	}
	// A window whose first sub-candle never arrived is sent, not as final.
	late := series("ETH/USDT", m1, 30*60_000, 3, 6)
	e := &derivedSeries{tf: m3, seeded: true}
	var u Update
	for _, c := range late[1:] {
		u, _ = e.add(Update{Candle: c, Final: true})
	}
	if u.Final || u.Candle.Trades != late[1].Trades+late[2].Trades {
		t.Fatalf("a window without its first sub-candle: %+v final %v", u.Candle, u.Final)
	}
}
