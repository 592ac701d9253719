package valkey

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/kandle/kandle/connectors/sinkkit"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// Reader is the read side of a valkey sink's keys, for kandle serve: the
// open candle of a series from its active hash, the symbols that had one,
// and a pub/sub subscriber that holds one subscription per channel on one
// dedicated connection, resubscribing after the connection drops.
type Reader struct {
	client valkey.Client
	names  names
	log    *slog.Logger

	mu   sync.Mutex
	subs map[string]bool        // channels that should be subscribed
	ded  valkey.DedicatedClient // the pub/sub connection while Run is connected
	up   chan struct{}          // closed once that connection has subscribed subs; a new one after it drops
}

// subscribeWait bounds how long Subscribe waits for Run's connection when
// there is none: the channel stays in the set and is subscribed whenever
// the connection comes up, but a caller that reads a snapshot next should
// not race the first messages.
const subscribeWait = 5 * time.Second

// NewReader connects to the sink's server (same config as the sink) and
// checks it answers.
func NewReader(ctx context.Context, cfg Config, log *slog.Logger) (*Reader, error) {
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("valkey: invalid config: %s", strings.Join(errs, "; "))
	}
	if log == nil {
		log = slog.Default()
	}
	client, err := newClient(ctx, &cfg, nil)
	if err != nil {
		return nil, err
	}
	return &Reader{client: client, names: names{cfg.KeyPrefix}, log: log.With("component", "valkey-reader"),
		subs: map[string]bool{}, up: make(chan struct{})}, nil
}

// Close closes the connections.
func (r *Reader) Close() { r.client.Close() }

// Active returns the candle stored in the active hash of (symbol, tf):
// the open window's latest state, or the last final when the newest window
// has closed and no trade opened the next one. ok is false when there is none.
func (r *Reader) Active(ctx context.Context, symbol, tf string) (c candle.Candle, ok bool, err error) {
	m, err := r.client.Do(ctx, r.client.B().Hgetall().Key(r.names.hash(tf, symbol)).Build()).AsStrMap()
	if err != nil {
		return candle.Candle{}, false, fmt.Errorf("valkey: read active candle %s %s: %w", symbol, tf, err)
	}
	if len(m) == 0 {
		return candle.Candle{}, false, nil
	}
	c, err = hashCandle(symbol, tf, m)
	if err != nil {
		return candle.Candle{}, false, fmt.Errorf("valkey: active candle %s %s: %w", symbol, tf, err)
	}
	return c, true, nil
}

// hashCandle decodes the fields written by hset.
func hashCandle(symbol, tf string, m map[string]string) (candle.Candle, error) {
	c := candle.Candle{Symbol: symbol, Timeframe: tf}
	var err error
	for _, f := range []struct {
		name string
		dst  *decimal.Decimal
	}{{"o", &c.Open}, {"h", &c.High}, {"l", &c.Low}, {"c", &c.Close}} {
		if *f.dst, err = decimal.Parse([]byte(m[f.name])); err != nil {
			return c, fmt.Errorf("field %s %q: %w", f.name, m[f.name], err)
		}
	}
	for _, f := range []struct {
		name string
		dst  *decimal.Sum
	}{{"v", &c.Volume}, {"q", &c.QuoteVolume}} {
		if *f.dst, err = decimal.ParseSum([]byte(m[f.name])); err != nil {
			return c, fmt.Errorf("field %s %q: %w", f.name, m[f.name], err)
		}
	}
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"t", &c.Trades}, {"open_time", &c.OpenTime}, {"close_time", &c.CloseTime}} {
		if *f.dst, err = strconv.ParseInt(m[f.name], 10, 64); err != nil {
			return c, fmt.Errorf("field %s %q: %w", f.name, m[f.name], err)
		}
	}
	if c.CloseTime <= c.OpenTime {
		return c, errors.New("close_time is not after open_time")
	}
	// Written by this version: tb tq fid lid, "" for none; a hash of an
	// older one has none of them.
	if m["tb"] != "" || m["tq"] != "" {
		c.Taker = true
		if c.TakerBuyVolume, err = decimal.ParseSum([]byte(m["tb"])); err == nil {
			c.TakerBuyQuoteVolume, err = decimal.ParseSum([]byte(m["tq"]))
		}
		if err != nil {
			return c, fmt.Errorf("fields tb %q, tq %q: %w", m["tb"], m["tq"], err)
		}
	}
	c.FirstTradeID, c.LastTradeID = m["fid"], m["lid"]
	// rev: absent from a hash written before revisions existed (rev 0).
	if r := m["rev"]; r != "" {
		rev, err := strconv.ParseUint(r, 10, 32)
		if err != nil {
			return c, fmt.Errorf("field rev %q: %w", r, err)
		}
		c.Rev = uint32(rev)
	}
	// A hash has no gap field: a window without trades is a gap candle.
	c.Gap = c.Trades == 0
	return c, nil
}

// Symbols returns every symbol that had an active candle, sorted.
func (r *Reader) Symbols(ctx context.Context) ([]string, error) {
	s, err := r.client.Do(ctx, r.client.B().Smembers().Key(r.names.symbols()).Build()).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("valkey: read symbols: %w", err)
	}
	slices.Sort(s)
	return s, nil
}

// Message is one published candle update.
type Message struct {
	Candle candle.Candle
	Final  bool
	// Raw is the published JSON (the candle's wire form plus "final").
	Raw []byte
}

// ParseMessage decodes a message published by the sink.
func ParseMessage(raw []byte) (Message, error) {
	c, err := candle.ParseJSON(raw)
	if err != nil {
		return Message{}, err
	}
	return Message{Candle: c, Final: bytes.Contains(raw, []byte(`"final":true`)), Raw: raw}, nil
}

// Subscribe adds the channel of (symbol, tf) to the subscriber's set. It
// returns once the server has the subscription, so a snapshot read next
// misses no message. While Run is not connected it waits for Run's
// connection to subscribe the set, at most subscribeWait (the channel stays
// in the set either way).
func (r *Reader) Subscribe(ctx context.Context, symbol, tf string) error {
	ch := r.names.channel(tf, symbol)
	r.mu.Lock()
	r.subs[ch] = true
	ded, up := r.ded, r.up
	r.mu.Unlock()
	if ded == nil {
		t := time.NewTimer(subscribeWait)
		defer t.Stop()
		select {
		case <-up:
		case <-t.C:
		case <-ctx.Done():
		}
		return nil
	}
	if err := ded.Do(ctx, ded.B().Subscribe().Channel(ch).Build()).Error(); err != nil {
		return fmt.Errorf("valkey: subscribe %s: %w", ch, err)
	}
	return nil
}

// Unsubscribe removes the channel of (symbol, tf) from the set.
func (r *Reader) Unsubscribe(ctx context.Context, symbol, tf string) error {
	ch := r.names.channel(tf, symbol)
	r.mu.Lock()
	delete(r.subs, ch)
	ded := r.ded
	r.mu.Unlock()
	if ded == nil {
		return nil
	}
	if err := ded.Do(ctx, ded.B().Unsubscribe().Channel(ch).Build()).Error(); err != nil {
		return fmt.Errorf("valkey: unsubscribe %s: %w", ch, err)
	}
	return nil
}

// Subscribed returns how many channels the set holds.
func (r *Reader) Subscribed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.subs)
}

// Run holds the pub/sub connection until ctx ends, calling fn for every
// message of a subscribed channel (fn must not block). When the connection
// drops it reconnects with backoff and subscribes the whole set again.
func (r *Reader) Run(ctx context.Context, fn func(Message)) error {
	for attempt := 0; ; attempt++ {
		err := r.runOnce(ctx, fn)
		if ctx.Err() != nil {
			return nil
		}
		r.log.Warn("valkey pub/sub connection lost; reconnecting", "err", err, "attempt", attempt+1)
		if sinkkit.Sleep(ctx, backoff(attempt)) != nil {
			return nil
		}
	}
}

func (r *Reader) runOnce(ctx context.Context, fn func(Message)) error {
	ded, cancel := r.client.Dedicate()
	defer cancel()
	wait := ded.SetPubSubHooks(valkey.PubSubHooks{OnMessage: func(m valkey.PubSubMessage) {
		msg, err := ParseMessage([]byte(m.Message))
		if err != nil {
			r.log.Warn("valkey: skipping an unreadable candle message", "channel", m.Channel, "err", err)
			return
		}
		fn(msg)
	}})
	r.mu.Lock()
	r.ded = ded
	chans := make([]string, 0, len(r.subs))
	for ch := range r.subs {
		chans = append(chans, ch)
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.ded = nil
		select {
		case <-r.up:
			r.up = make(chan struct{})
		default:
		}
		r.mu.Unlock()
	}()
	if len(chans) > 0 {
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		err := ded.Do(sctx, ded.B().Subscribe().Channel(chans...).Build()).Error()
		scancel()
		if err != nil {
			return fmt.Errorf("valkey: subscribe %d channels: %w", len(chans), err)
		}
	}
	r.mu.Lock()
	close(r.up)
	r.mu.Unlock()
	select {
	case <-ctx.Done():
		return nil
	case err := <-wait:
		if err == nil {
			err = errors.New("pub/sub connection closed")
		}
		return err
	}
}
