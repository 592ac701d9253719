package valkey

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/valkey-io/valkey-go"
)

const minute = int64(60_000)

// quiet drops the sink's logs (outage tests warn on purpose).
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newSink starts a sink on addr with cfg adjusted by mod; it is closed at cleanup.
func newSink(t testing.TB, addr string, mod func(*Config), opts ...Option) *Sink {
	t.Helper()
	cfg := DefaultConfig(addr)
	if mod != nil {
		mod(&cfg)
	}
	opts = append([]Option{WithRegisterer(prometheus.NewRegistry()), WithLogger(quiet)}, opts...)
	s, err := New(context.Background(), cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// reader is a plain client for checking what the sink stored.
func reader(t testing.TB, addr string, extra ...func(*valkey.ClientOption)) valkey.Client {
	t.Helper()
	opt := valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true}
	for _, fn := range extra {
		fn(&opt)
	}
	c, err := valkey.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func hgetall(t testing.TB, c valkey.Client, key string) map[string]string {
	t.Helper()
	m, err := c.Do(context.Background(), c.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		t.Fatalf("HGETALL %s: %v", key, err)
	}
	return m
}

// mk builds a 1m candle of sym opening at minute n with the given OHLC.
func mk(sym string, n int64, o, h, l, c, v, q string, trades int64) candle.Candle {
	return candle.Candle{Symbol: sym, Timeframe: "1m", OpenTime: n * minute, CloseTime: (n + 1) * minute,
		Open: decimal.MustParse(o), High: decimal.MustParse(h), Low: decimal.MustParse(l), Close: decimal.MustParse(c),
		Volume: decimal.MustParseSum(v), QuoteVolume: decimal.MustParseSum(q), Trades: trades}
}

// pubMsg is a published candle.
type pubMsg struct {
	candle.Candle
	Final bool
}

// subscribe listens on channel and returns the messages; it waits until the
// server counts the subscription, so nothing published after it is missed.
func subscribe(t testing.TB, c valkey.Client, channel string) <-chan pubMsg {
	t.Helper()
	out := make(chan pubMsg, 1024)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Receive(ctx, c.B().Subscribe().Channel(channel).Build(), func(m valkey.PubSubMessage) {
			msg, err := ParseMessage([]byte(m.Message))
			if err != nil && !json.Valid([]byte(m.Message)) {
				t.Errorf("bad message %q: %v", m.Message, err)
				return
			} // a valid JSON message that is not a candle (an event) gives a zero candle
			out <- pubMsg{msg.Candle, msg.Final}
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, 5*time.Second, func() bool {
		m, err := c.Do(context.Background(), c.B().PubsubNumsub().Channel(channel).Build()).AsIntMap()
		return err == nil && m[channel] > 0
	}, "subscription to "+channel)
	return out
}

func recv(t testing.TB, ch <-chan pubMsg) pubMsg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no message within 5s")
		return pubMsg{}
	}
}

// waitFor polls cond every 10ms until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantHash checks the hash holds exactly c's fields.
func wantHash(t testing.TB, got map[string]string, c candle.Candle) {
	t.Helper()
	want := map[string]string{"o": c.Open.String(), "h": c.High.String(), "l": c.Low.String(), "c": c.Close.String(),
		"v": c.Volume.String(), "q": c.QuoteVolume.String(), "t": fmt.Sprint(c.Trades),
		"open_time": fmt.Sprint(c.OpenTime), "close_time": fmt.Sprint(c.CloseTime)}
	want["tb"], want["tq"], want["fid"], want["lid"] = tradeFields(&c)
	want["rev"] = fmt.Sprint(c.Rev)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("hash\n got %v\nwant %v", got, want)
	}
}

func startRedis(t testing.TB, extra ...string) *testkit.Service { return testkit.Redis(t, extra...) }

type candle1 = candle.Candle

func itoa(i int) string { return fmt.Sprint(i) }

// counter reads a counter's current value.
func counter(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
