package serve

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/kandle/kandle/candle"
)

// key names one series.
type key struct{ symbol, tf string }

// hub holds the process's pub/sub subscriptions (one per stored series,
// counted by the channels fed from it) and fans updates out to client
// queues.
type hub struct {
	s *Server

	subMu sync.Mutex // serialises changes of the Feed's subscription set

	mu      sync.Mutex
	subs    map[key]*channel   // by the series clients asked for
	feeds   map[key][]*channel // by the stored series they are fed from
	clients map[*client]struct{}

	conns sync.WaitGroup // stream handlers, waited for by Server.Run
}

// channel is one series clients subscribe to: a stored series, whose
// updates go out as the Feed delivers them, or a derived one, built from
// the updates of the stored series it is derived from.
type channel struct {
	k       key
	feed    key // the stored series whose updates feed it
	d       *derivedSeries
	clients map[*client]struct{}
}

func newHub(s *Server) *hub {
	return &hub{s: s, subs: map[key]*channel{}, feeds: map[key][]*channel{}, clients: map[*client]struct{}{}}
}

// run delivers the feed's updates until ctx ends.
func (h *hub) run(ctx context.Context) {
	if h.s.o.Feed == nil {
		<-ctx.Done()
		return
	}
	if err := h.s.o.Feed.Run(ctx, h.publish); err != nil && ctx.Err() == nil {
		h.s.log.Error("live feed stopped", "err", err)
	}
}

// publish fans u out to the clients of the channels fed by its series.
func (h *hub) publish(u Update) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ch := range h.feeds[key{u.Candle.Symbol, u.Candle.Timeframe}] {
		h.send(ch, u)
	}
}

// send turns u, an update of ch's stored series, into ch's update and
// queues it for ch's clients. Caller holds mu.
func (h *hub) send(ch *channel, u Update) {
	if ch.d != nil {
		var ok bool
		if u, ok = ch.d.add(u); !ok {
			return
		}
	}
	if len(ch.clients) == 0 {
		return
	}
	f := newFrame(u) // encoded once, shared (read-only) by every client
	for c := range ch.clients {
		c.push(ch.k, f)
	}
}

// subscribe adds c to k's channel; the first channel fed by a stored
// series makes the Feed subscribe to it. base is the stored timeframe a
// derived k (of timeframe tf) is built from; zero for a stored k.
func (h *hub) subscribe(ctx context.Context, c *client, k key, tf, base candle.Timeframe) error {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	h.mu.Lock()
	ch, ok := h.subs[k]
	h.mu.Unlock()
	if !ok {
		ch = &channel{k: k, feed: k, clients: map[*client]struct{}{}}
		if base.N > 0 {
			ch.feed, ch.d = key{k.symbol, base.String()}, &derivedSeries{tf: tf}
		}
		h.mu.Lock()
		fresh := len(h.feeds[ch.feed]) == 0
		h.mu.Unlock()
		if fresh {
			if h.s.o.Feed != nil {
				if err := h.s.o.Feed.Subscribe(ctx, ch.feed.symbol, ch.feed.tf); err != nil {
					return err
				}
			}
			h.s.m.channels.Inc()
		}
		h.mu.Lock()
		h.feeds[ch.feed] = append(h.feeds[ch.feed], ch)
		h.subs[k] = ch
		h.mu.Unlock()
	}
	h.mu.Lock()
	ch.clients[c] = struct{}{}
	h.mu.Unlock()
	return nil
}

// unsubscribe removes c from k's channel; the last channel fed by a stored
// series ends the Feed's subscription to it.
func (h *hub) unsubscribe(ctx context.Context, c *client, k key) {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	h.mu.Lock()
	ch, ok := h.subs[k]
	last := false
	if ok {
		delete(ch.clients, c)
		if len(ch.clients) == 0 {
			delete(h.subs, k)
			fs := slices.DeleteFunc(h.feeds[ch.feed], func(x *channel) bool { return x == ch })
			if last = len(fs) == 0; last {
				delete(h.feeds, ch.feed)
			} else {
				h.feeds[ch.feed] = fs
			}
		}
	}
	h.mu.Unlock()
	if !last {
		return
	}
	h.s.m.channels.Dec()
	if h.s.o.Feed != nil {
		if err := h.s.o.Feed.Unsubscribe(ctx, ch.feed.symbol, ch.feed.tf); err != nil {
			h.s.log.Warn("live feed unsubscribe failed", "symbol", ch.feed.symbol, "timeframe", ch.feed.tf, "err", err)
		}
	}
}

// channels returns how many stored series the process is subscribed to.
func (h *hub) channels() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.feeds)
}

// closeAll disconnects every client (server shutdown).
func (h *hub) closeAll() {
	h.mu.Lock()
	cs := make([]*client, 0, len(h.clients))
	for c := range h.clients {
		cs = append(cs, c)
	}
	h.mu.Unlock()
	for _, c := range cs {
		c.kill(websocket.StatusGoingAway, "server shutting down; reconnect to another instance", "shutdown")
	}
}

// markWindows is how many windows of one series a client's marks (and a
// derived series' state) remember: the open window, the ones whose finals
// may still arrive after it opened, and a margin. An update of a window
// older than all of them, once that many are remembered, is dropped.
const markWindows = 4

// revisedWindows is how many windows older than the last markWindows a
// client's marks remember because a revision of them was sent: a
// revision of a closed candle may come long after the next windows
// opened (within the processor's revision horizon), and a redelivered
// older revision of it must still be dropped.
const revisedWindows = 64

// mark is the newest state a client was given of one window, and where
// that state waits in the client's queue: at index queued-1 while the
// queue's generation is gen.
type mark struct {
	open   int64
	trades int64
	rev    uint32
	final  bool
	gen    uint64
	queued int
}

// admits reports whether u, an update of m's window, may follow m. A
// window's states are ordered by (final, rev), and live states by trades:
// before the final, the same window with at least as many trades, or a
// final; after a final, only a final with a higher rev (a revision of the
// closed candle). So a window's revs only go up.
func (m mark) admits(u Update) bool {
	if m.final {
		return u.Final && u.Candle.Rev > m.rev
	}
	return u.Final || u.Candle.Trades >= m.trades
}

// revision reports whether u is a revision of a closed candle (a final
// emitted again, rev above 0).
func revision(u *Update) bool { return u.Final && u.Candle.Rev > 0 }

// marks are a client's marks of one series: recent holds the last
// markWindows windows, oldest first. Order is kept per window, not per
// series: the final of a window arrives after the next window opened (its
// watermark passes only with a later trade), and is still sent. revised
// holds, oldest first, up to revisedWindows older windows that a revision
// was sent of (or whose revision left recent), so a revision of an old
// window goes out once and an older one after it never does.
type marks struct {
	recent  []mark
	revised []mark
}

// admit reports whether u may follow what was sent of its window, and
// records it when so, returning its window's mark (valid until the next
// admit).
func (ms *marks) admit(u *Update) (*mark, bool) {
	o := u.Candle.OpenTime
	s := ms.recent
	i, found := slices.BinarySearchFunc(s, o, byOpen)
	if found {
		return s[i].take(u)
	}
	if i == 0 && len(s) >= markWindows {
		// Older than every recent window: only a revision goes out.
		if !revision(u) {
			return nil, false
		}
		j, found := slices.BinarySearchFunc(ms.revised, o, byOpen)
		if found {
			return ms.revised[j].take(u)
		}
		if j == 0 && len(ms.revised) >= revisedWindows {
			return nil, false // older than every window remembered
		}
		ms.revised = slices.Insert(ms.revised, j, newMark(u))
		if len(ms.revised) > revisedWindows { // forget the oldest
			ms.revised, j = slices.Delete(ms.revised, 0, 1), j-1
		}
		return &ms.revised[j], true
	}
	s = slices.Insert(s, i, newMark(u))
	if d := len(s) - markWindows; d > 0 {
		for _, m := range s[:d] {
			if m.final && m.rev > 0 { // keep what stops an older revision
				ms.remember(m)
			}
		}
		s, i = slices.Delete(s, 0, d), i-d
	}
	ms.recent = s
	return &s[i], true
}

func newMark(u *Update) mark {
	return mark{open: u.Candle.OpenTime, trades: u.Candle.Trades, rev: u.Candle.Rev, final: u.Final}
}

// take records u as the newest state of m's window if m admits it.
func (m *mark) take(u *Update) (*mark, bool) {
	if !m.admits(*u) {
		return nil, false
	}
	m.trades, m.rev, m.final = u.Candle.Trades, u.Candle.Rev, u.Final
	return m, true
}

// remember moves m, a revised window leaving recent, into revised.
func (ms *marks) remember(m mark) {
	j, found := slices.BinarySearchFunc(ms.revised, m.open, byOpen)
	if found {
		ms.revised[j] = m
		return
	}
	ms.revised = slices.Insert(ms.revised, j, m)
	if len(ms.revised) > revisedWindows {
		ms.revised = slices.Delete(ms.revised, 0, 1)
	}
}

func byOpen(m mark, o int64) int { return cmp.Compare(m.open, o) }

// frame is one update of a series and its message, encoded once and
// shared, read-only, by the queues of every client it goes to: queueing it
// costs a client a pointer, not a copy or an encoding of its own.
type frame struct {
	u   Update
	msg []byte
}

func newFrame(u Update) *frame { return &frame{u: u, msg: updateJSON(nil, u)} }

// entry is one queued message: a candle update (coalesced by window) or a
// reply.
type entry struct {
	f     *frame
	reply []byte
}

// client is one WebSocket connection: a bounded queue of entries in which
// updates of the same window are coalesced, and the marks that keep its
// updates moving forward.
type client struct {
	h      *hub
	conn   *websocket.Conn
	cancel context.CancelFunc

	mu     sync.Mutex
	q      []entry
	gen    uint64         // counts the queue's hand-overs to the writer, from 1
	subs   map[key]*marks // the series subscribed to, and their marks
	dead   bool
	code   websocket.StatusCode // why the server ends the connection
	reason string
	wake   chan struct{}
}

func newClient(h *hub, conn *websocket.Conn, cancel context.CancelFunc) *client {
	return &client{h: h, conn: conn, cancel: cancel, gen: 1, subs: map[key]*marks{}, wake: make(chan struct{}, 1)}
}

// push queues f, an update of series k, unless it would go back in time;
// it never blocks and allocates nothing once the client's queue and marks
// have their size. A full queue disconnects the client.
func (c *client) push(k key, f *frame) {
	u := &f.u
	c.mu.Lock()
	ms := c.subs[k]
	if c.dead || ms == nil {
		c.mu.Unlock()
		return
	}
	m, ok := ms.admit(u)
	if !ok {
		c.mu.Unlock()
		return
	}
	if m.gen == c.gen && m.queued > 0 { // an older state of the window waits
		c.q[m.queued-1].f = f
		c.mu.Unlock()
		c.h.s.m.coalesced.Inc()
		return
	}
	if len(c.q) >= c.h.s.o.Config.ClientQueue {
		c.mu.Unlock()
		c.kill(websocket.StatusTryAgainLater, fmt.Sprintf("slow consumer: more than %d updates queued; reconnect and backfill from /v1/candles", c.h.s.o.Config.ClientQueue), "slow")
		return
	}
	c.q = append(c.q, entry{f: f})
	m.gen, m.queued = c.gen, len(c.q)
	c.mu.Unlock()
	c.notify()
}

// reply queues a response to a client request.
func (c *client) reply(b []byte) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	if len(c.q) >= c.h.s.o.Config.ClientQueue {
		c.mu.Unlock()
		c.kill(websocket.StatusTryAgainLater, "slow consumer: replies not read", "slow")
		return
	}
	c.q = append(c.q, entry{reply: b})
	c.mu.Unlock()
	c.notify()
}

func (c *client) notify() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// kill marks the client for disconnection with a status and reason (once)
// and wakes its writer, which closes the connection. It never blocks, so
// the hub may call it while fanning out.
func (c *client) kill(code websocket.StatusCode, reason, metric string) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead, c.code, c.reason = true, code, reason
	c.mu.Unlock()
	c.h.s.m.dropped.WithLabelValues(metric).Inc()
	c.h.s.log.Info("stream client disconnected", "reason", reason)
	c.notify()
}

// killed returns the close status and reason once kill was called.
func (c *client) killed() (websocket.StatusCode, string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.code, c.reason, c.reason != ""
}

// close sends a close frame with the reason and ends the connection. A
// client that does not answer the close handshake (it stopped reading)
// is cut off after a second.
func (c *client) close(code websocket.StatusCode, reason string) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.conn.Close(code, reason)
	}()
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		c.conn.CloseNow()
		<-done
	}
	c.cancel()
}

// take returns the queued entries and hands the queue spare's array (the
// writer's previous batch, written) to fill next, so that queueing
// allocates nothing once the two arrays have grown to the client's pace.
func (c *client) take(spare []entry) []entry {
	clear(spare) // the written frames and replies are not held on to
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.q
	c.q = spare[:0]
	c.gen++ // the marks' queue positions are stale
	return q
}

// writer sends queued entries until ctx ends.
//
// A write is bounded by write_wait through one timer per client, reset for
// each message: when it fires the connection is closed, which ends the
// write. The writes take no deadline of their own, which would cost a
// context, its timer and a callback per message; the end of ctx closes the
// connection too.
func (c *client) writer(ctx context.Context) {
	timer := time.AfterFunc(time.Hour, func() { c.conn.CloseNow() })
	timer.Stop()
	defer timer.Stop()
	defer context.AfterFunc(ctx, func() { c.conn.CloseNow(); c.notify() })()
	var batch []entry
	for {
		<-c.wake
		if ctx.Err() != nil {
			return
		}
		if code, reason, ok := c.killed(); ok {
			c.close(code, reason)
			return
		}
		batch = c.take(batch)
		updates := 0
		for _, e := range batch {
			msg := e.reply
			if e.f != nil {
				msg = e.f.msg
			}
			timer.Reset(c.h.s.o.Config.WriteWait)
			err := c.conn.Write(context.Background(), websocket.MessageText, msg)
			if !timer.Stop() && err == nil {
				err = errors.New("write_wait passed") // and the connection is closed
			}
			if err != nil {
				c.h.s.m.delivered.Add(float64(updates))
				if ctx.Err() == nil {
					c.kill(websocket.StatusTryAgainLater, "write timed out: the client reads too slowly", "write")
					c.close(websocket.StatusTryAgainLater, "write timed out: the client reads too slowly")
				}
				return
			}
			if e.f != nil {
				updates++
			}
		}
		c.h.s.m.delivered.Add(float64(updates))
	}
}

// updateJSON is a stream message: the candle as the candle API answers it
// (the output topics' shape plus "vwap" and "final").
func updateJSON(b []byte, u Update) []byte { return AppendCandle(b, &u.Candle, u.Final) }

// startPinger pings the client every ping_interval; a missing pong
// disconnects it. Between pings no goroutine waits for the next one: a
// timer starts each ping (which waits a round trip for the pong) in a
// goroutine of its own, so an idle client costs one goroutine fewer. The
// returned stop ends the pings and waits for one in flight; ctx's end
// cuts a ping short.
func (c *client) startPinger(ctx context.Context) (stop func()) {
	every := c.h.s.o.Config.PingInterval
	var (
		mu      sync.Mutex // orders the timer's callbacks with stop
		stopped bool
		pinging sync.WaitGroup
		t       *time.Timer
	)
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		pinging.Add(1)
		mu.Unlock()
		defer pinging.Done()
		pctx, cancel := context.WithTimeout(ctx, every)
		err := c.conn.Ping(pctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				c.kill(websocket.StatusPolicyViolation, "no pong within ping_interval", "ping")
			}
			return
		}
		mu.Lock()
		if !stopped {
			t.Reset(every)
		}
		mu.Unlock()
	})
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
		pinging.Wait()
	}
}

// request is a client message: {"id":1,"method":"SUBSCRIBE",
// "params":[{"symbol":"BTC/USDT","timeframe":"1m"}]}.
type request struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params []struct {
		Symbol    string `json:"symbol"`
		Timeframe string `json:"timeframe"`
	} `json:"params"`
}

// handleStream is GET /v1/stream.
func (s *Server) handleStream(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(r, true) {
		writeError(w, http.StatusUnauthorized, "missing or wrong token: send Authorization: Bearer <token> or ?token=")
		return
	}
	if s.o.Feed == nil {
		writeError(w, http.StatusNotFound, "no live stream: the topology's serve section names no live store (serve.live)")
		return
	}
	opts := &websocket.AcceptOptions{}
	for _, o := range s.o.Config.CORSOrigins {
		if o == "*" {
			opts.InsecureSkipVerify = true // any origin
		} else if u, err := url.Parse(o); err == nil {
			opts.OriginPatterns = append(opts.OriginPatterns, u.Host)
		}
	}
	// The server's read and write timeouts are for API requests; a stream
	// lives on, watched by pings and write_wait instead.
	rc := http.NewResponseController(w)
	if err := errors.Join(rc.SetReadDeadline(time.Time{}), rc.SetWriteDeadline(time.Time{})); err != nil {
		s.log.Warn("stream: cannot clear the connection deadlines", "err", err)
	}
	conn, err := websocket.Accept(w, r, opts)
	if err != nil {
		return // Accept wrote the error
	}
	s.hub.conns.Add(1)
	defer s.hub.conns.Done()
	conn.SetReadLimit(s.o.Config.MaxMessageBytes)
	ctx, cancel := context.WithCancel(r.Context())
	c := newClient(s.hub, conn, cancel)
	s.hub.mu.Lock()
	s.hub.clients[c] = struct{}{}
	s.hub.mu.Unlock()
	s.m.clients.Inc()
	var wg sync.WaitGroup
	stopPings := c.startPinger(ctx)
	defer func() {
		cancel()
		wg.Wait()
		stopPings()
		c.mu.Lock()
		c.dead = true
		if c.reason == "" {
			c.reason = "closed"
		}
		keys := make([]key, 0, len(c.subs))
		for k := range c.subs {
			keys = append(keys, k)
		}
		c.mu.Unlock()
		uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
		for _, k := range keys {
			s.hub.unsubscribe(uctx, c, k)
		}
		ucancel()
		s.hub.mu.Lock()
		delete(s.hub.clients, c)
		s.hub.mu.Unlock()
		s.m.clients.Dec()
		conn.CloseNow()
	}()
	wg.Go(func() { c.writer(ctx) })
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			if errors.As(err, new(websocket.CloseError)) || ctx.Err() != nil {
				return
			}
			if websocket.CloseStatus(err) == -1 {
				s.m.dropped.WithLabelValues("protocol").Inc()
			}
			return
		}
		if typ != websocket.MessageText {
			c.reply(errorReply(nil, 400, "send JSON text messages"))
			continue
		}
		s.handleRequest(ctx, c, data)
	}
}

func errorReply(id json.RawMessage, code int, msg string) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		ID    json.RawMessage `json:"id"`
		Error struct {
			Code int    `json:"code"`
			Msg  string `json:"msg"`
		} `json:"error"`
	}{ID: id, Error: struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
	}{code, msg}})
	return b
}

func resultReply(id json.RawMessage, result any) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		ID     json.RawMessage `json:"id"`
		Result any             `json:"result"`
	}{id, result})
	return b
}

// handleRequest answers SUBSCRIBE, UNSUBSCRIBE and LIST_SUBSCRIPTIONS.
func (s *Server) handleRequest(ctx context.Context, c *client, data []byte) {
	var req request
	if err := json.Unmarshal(data, &req); err != nil {
		c.reply(errorReply(nil, 400, `not a request; send {"id":1,"method":"SUBSCRIBE","params":[{"symbol":"BTC/USDT","timeframe":"1m"}]}`))
		return
	}
	if len(req.ID) > 64 {
		c.reply(errorReply(nil, 400, "id: too long; use a number or a short string"))
		return
	}
	switch req.Method {
	case "SUBSCRIBE", "UNSUBSCRIBE":
	case "LIST_SUBSCRIPTIONS":
		c.mu.Lock()
		list := make([]map[string]string, 0, len(c.subs))
		for k := range c.subs {
			list = append(list, map[string]string{"symbol": k.symbol, "timeframe": k.tf})
		}
		c.mu.Unlock()
		c.reply(resultReply(req.ID, list))
		return
	default:
		c.reply(errorReply(req.ID, 400, fmt.Sprintf("method %q; use SUBSCRIBE, UNSUBSCRIBE or LIST_SUBSCRIPTIONS", req.Method)))
		return
	}
	if len(req.Params) == 0 {
		c.reply(errorReply(req.ID, 400, `params: list the series, e.g. [{"symbol":"BTC/USDT","timeframe":"1m"}]`))
		return
	}
	type wanted struct {
		k        key
		tf, base candle.Timeframe
	}
	keys := make([]key, 0, len(req.Params))
	want := map[key]wanted{}
	for i, p := range req.Params {
		rctx, cancel := context.WithTimeout(ctx, s.o.Config.StoreTimeout)
		tf, base, err := s.series(rctx, p.Symbol, p.Timeframe)
		cancel()
		if err != nil {
			code := 400
			var ae *apiError
			if errors.As(err, &ae) {
				code = ae.status
			}
			c.reply(errorReply(req.ID, code, "params["+strconv.Itoa(i)+"]: "+err.Error()))
			return
		}
		// Named as its candles name it ("01m" is the stored 1m).
		k := key{p.Symbol, tf.String()}
		keys = append(keys, k)
		want[k] = wanted{k, tf, base}
	}
	if req.Method == "UNSUBSCRIBE" {
		for _, k := range keys {
			c.mu.Lock()
			had := c.subs[k] != nil
			delete(c.subs, k)
			c.mu.Unlock()
			if had {
				s.hub.unsubscribe(ctx, c, k)
			}
		}
		c.reply(resultReply(req.ID, nil))
		return
	}
	c.mu.Lock()
	n := len(c.subs)
	for _, k := range keys {
		if c.subs[k] == nil {
			n++
		}
	}
	c.mu.Unlock()
	if n > s.o.Config.MaxSubscriptions {
		c.reply(errorReply(req.ID, 400, fmt.Sprintf("too many subscriptions: at most %d per connection (max_subscriptions); unsubscribe some or open another connection", s.o.Config.MaxSubscriptions)))
		return
	}
	var fresh []key
	for _, k := range keys {
		c.mu.Lock()
		had := c.subs[k] != nil
		if !had {
			c.subs[k] = new(marks)
		}
		c.mu.Unlock()
		if had {
			continue
		}
		if err := s.hub.subscribe(ctx, c, k, want[k].tf, want[k].base); err != nil {
			c.mu.Lock()
			delete(c.subs, k)
			c.mu.Unlock()
			s.log.Warn("live feed subscribe failed", "symbol", k.symbol, "timeframe", k.tf, "err", err)
			c.reply(errorReply(req.ID, 503, "the live store did not take the subscription; retry shortly"))
			return
		}
		fresh = append(fresh, k)
	}
	c.reply(resultReply(req.ID, nil))
	// The snapshot of the open candle comes after the subscription exists,
	// so no update between the two is missed; marks drop whichever of the
	// two is older.
	for _, k := range fresh {
		rctx, cancel := context.WithTimeout(ctx, s.o.Config.StoreTimeout)
		var err error
		if w := want[k]; w.base.N > 0 {
			err = s.derivedSnapshot(rctx, c, k, w.tf, w.base)
		} else if s.o.Live != nil {
			var cd candle.Candle
			var ok bool
			if cd, ok, err = s.o.Live.OpenCandle(rctx, k.symbol, k.tf); err == nil && ok {
				c.push(k, newFrame(Update{Candle: cd}))
			}
		}
		cancel()
		if err != nil {
			s.log.Warn("open candle snapshot failed", "symbol", k.symbol, "timeframe", k.tf, "err", err)
		}
	}
}
