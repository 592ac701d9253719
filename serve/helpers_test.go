package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/topology"
	"github.com/kandle/kandle/topology/spec"
)

// defaults returns the serve section as a topology without one gets it.
func defaults(t testing.TB) topology.Serve {
	var c topology.Serve
	if err := spec.FillDefaults(&c); err != nil {
		t.Fatal(err)
	}
	return c
}

func tf(t testing.TB, s string) candle.Timeframe {
	x, err := candle.ParseTimeframe(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// series makes n closed candles of symbol/timeframe from start, every
// fifth a gap candle, with exact decimals, taker buy volumes and trade ids.
func series(symbol string, tfr candle.Timeframe, start int64, n int, seed uint64) []candle.Candle {
	r := rand.New(rand.NewPCG(seed, 7))
	var out []candle.Candle
	o := tfr.Start(start)
	prev := decimal.MustParse("100")
	for i := 0; i < n; i++ {
		c := candle.Candle{Symbol: symbol, Timeframe: tfr.String(), OpenTime: o, CloseTime: tfr.End(o), Taker: true}
		if i%5 == 4 {
			c.Open, c.High, c.Low, c.Close, c.Gap = prev, prev, prev, prev, true
			c.Volume, c.QuoteVolume = decimal.Sum{}, decimal.Sum{}
		} else {
			px := decimal.MustParse(fmt.Sprintf("%d.%06d", 100+r.IntN(50), r.IntN(1_000_000)))
			lo, hi := prev, px
			if px.Cmp(prev) < 0 {
				lo, hi = px, prev
			}
			hi, _ = hi.Add(decimal.MustParse("0.5"))
			c.Open, c.High, c.Low, c.Close = prev, hi, lo, px
			c.Volume = decimal.MustParseSum(fmt.Sprintf("0.%018d", 1+r.Uint64N(999_999_999_999_999_999)))
			c.QuoteVolume = c.Volume
			c.Trades = int64(1 + r.IntN(20))
			// Taker buy volumes (a third of the volume, a part of 36
			// places) and trade ids; a gap candle has zero and none.
			c.TakerBuyVolume = decimal.MustParseSum(fmt.Sprintf("0.%018d", 1+r.Uint64N(999_999_999_999_999)))
			c.TakerBuyQuoteVolume = decimal.Product(px, decimal.MustParse("0.000000000000000001"))
			c.FirstTradeID, c.LastTradeID = fmt.Sprint(o/1000), fmt.Sprint(o/1000+c.Trades-1)
			prev = px
		}
		out = append(out, c)
		o = c.CloseTime
	}
	return out
}

// start runs s on a loopback port until the test ends; it returns the base URL.
func start(t testing.TB, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := s.Run(ctx, ln); err != nil {
			t.Errorf("run: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return "http://" + ln.Addr().String()
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// get fetches url and returns the status and body.
func get(t testing.TB, url string, hdr ...string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// pageBody is a /v1/candles answer.
type pageBody struct {
	Candles    []json.RawMessage `json:"candles"`
	NextCursor string            `json:"next_cursor"`
	Order      string            `json:"order"`
}

func decode(t testing.TB, b []byte) pageBody {
	t.Helper()
	var p pageBody
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return p
}

// poll waits up to 10s for cond.
func poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newReq(url string, hdr ...string) (*http.Response, error) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}
