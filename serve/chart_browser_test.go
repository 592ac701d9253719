package serve

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// chromium is Debian's browser, installed by scripts/test-deps.sh.
const chromium = "/usr/bin/chromium"

// TestChartRedrawsRevision opens the chart page in a headless browser on a
// series whose bars are final, then sends a revision of an older bar (rev
// 1, a new high) through the stream: the page redraws that bar with the
// revision's values.
func TestChartRedrawsRevision(t *testing.T) {
	bctx := browser(t)
	cs, mem, s := chartSeries(t)
	hole := cs[10] // a window whose first candle comes late (below)
	mem.Add(cs[:10]...)
	mem.Add(cs[11:29]...)
	mem.Active(cs[29])
	page := start(t, s)
	if err := chromedp.Do(bctx, chromedp.Navigate(page+"/?symbol="+url.QueryEscape("BTC/USDT")+"&timeframe=1m")); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	read := func() pageState { return readPage(t, bctx) }
	for deadline := time.Now().Add(30 * time.Second); ; {
		st := read()
		if st.Error != "" {
			t.Fatalf("the page reports: %s", st.Error)
		}
		if st.Ready && st.Bars == len(cs)-1 && s.hub.channels() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the chart never drew the %d bars and subscribed: %+v", len(cs)-1, st)
		}
		time.Sleep(50 * time.Millisecond)
	}

	old := cs[20]
	rev := revised(old, 1)
	rev.High = decimal.MustParse("987654.25")
	mem.Add(rev) // stored and published, as the pipeline's sinks do
	type drawn struct {
		Bar    *struct{ High float64 }
		Candle *struct {
			Rev    uint32 `json:"rev"`
			High   string `json:"high"`
			Trades int64  `json:"trades"`
			Final  bool   `json:"final"`
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		d, err := chromedp.Run(bctx, chromedp.Evaluate[drawn](fmt.Sprintf(`window.kandle.drawn(%d)`, old.OpenTime/1000)))
		if err != nil {
			t.Fatalf("evaluate: %v", err)
		}
		if d.Bar != nil && d.Candle != nil && d.Bar.High == 987654.25 && d.Candle.Rev == 1 && d.Candle.Final &&
			d.Candle.High == rev.High.String() && d.Candle.Trades == rev.Trades && read().Redrawn > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the revised bar was not redrawn: bar %+v candle %+v", d.Bar, d.Candle)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The first candle (rev 0) of a window that had none, after newer
	// ones (a late trade made it): the page inserts it in time order.
	mem.Add(hole)
	for deadline := time.Now().Add(30 * time.Second); ; {
		d, err := chromedp.Run(bctx, chromedp.Evaluate[drawn](fmt.Sprintf(`window.kandle.drawn(%d)`, hole.OpenTime/1000)))
		if err != nil {
			t.Fatalf("evaluate: %v", err)
		}
		if st := read(); d.Bar != nil && d.Candle != nil && d.Candle.Final && d.Candle.High == hole.High.String() && st.Bars == len(cs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the late window's first candle was not inserted: bar %+v candle %+v, %+v", d.Bar, d.Candle, read())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestChartMissesNoCandleWhileLoading holds the page's read of the newest
// candles until a final of a window that read did not hold (a quiet
// window's gap candle, say) was stored and published: the page subscribed
// before it read, so it draws that candle, which the stream never sends
// again.
func TestChartMissesNoCandleWhileLoading(t *testing.T) {
	bctx := browser(t)
	cs, mem, s := chartSeries(t)
	missing := cs[28] // published while the page's read is held
	mem.Add(cs[:28]...)
	mem.Active(cs[29])
	backend, err := url.Parse(start(t, s))
	if err != nil {
		t.Fatal(err)
	}
	// A proxy in front of the server holds the first answer of
	// /v1/candles (read, not yet sent) until release is closed.
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	proxy := httputil.NewSingleHostReverseProxy(backend)
	proxy.ModifyResponse = func(r *http.Response) error {
		if r.Request.URL.Path == "/v1/candles" {
			once.Do(func() { close(held); <-release })
		}
		return nil
	}
	front := httptest.NewServer(proxy)
	defer front.Close()
	defer once.Do(func() {}) // a failed test never blocks the proxy

	if err := chromedp.Do(bctx, chromedp.Navigate(front.URL+"/?symbol="+url.QueryEscape("BTC/USDT")+"&timeframe=1m")); err != nil {
		close(release)
		t.Fatalf("open the page: %v", err)
	}
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatal("the page never read the newest candles")
	}
	mem.Add(missing) // stored and published, as the pipeline's sinks do
	close(release)

	for deadline := time.Now().Add(30 * time.Second); ; {
		st := readPage(t, bctx)
		if st.Error != "" {
			t.Fatalf("the page reports: %s", st.Error)
		}
		if st.Ready && st.Bars == len(cs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the chart has %+v, want %d bars: the candle published while the page read the newest ones is missing", st, len(cs))
		}
		time.Sleep(50 * time.Millisecond)
	}
	type drawn struct {
		Candle *struct {
			Final bool   `json:"final"`
			Close string `json:"close"`
		}
	}
	d, err := chromedp.Run(bctx, chromedp.Evaluate[drawn](fmt.Sprintf(`window.kandle.drawn(%d)`, missing.OpenTime/1000)))
	if err != nil || d.Candle == nil || !d.Candle.Final || d.Candle.Close != missing.Close.String() {
		t.Fatalf("the bar at %d: %+v (%v), want the final published while the page loaded", missing.OpenTime, d.Candle, err)
	}
}

// chartSeries returns 30 one-minute candles of BTC/USDT from 12:00, an
// empty store that serves and publishes them once added, and a server on
// it whose clock reads 12:31.
func chartSeries(t *testing.T) ([]candle.Candle, *Memory, *Server) {
	t.Helper()
	m1 := tf(t, "1m")
	start0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	mem := NewMemory(1000)
	s, err := New(Options{Config: defaults(t), Timeframes: map[string]candle.Timeframe{"1m": m1}, Hot: mem, Live: mem, Feed: mem,
		Now: func() time.Time { return start0.Add(31 * time.Minute) }, Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return series("BTC/USDT", m1, start0.UnixMilli(), 30, 11), mem, s
}

// browser starts a headless Chromium for one test.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := exec.LookPath(chromium); err != nil {
		t.Fatalf("%s not found: the chart page test needs Debian's chromium; run scripts/test-deps.sh (or apt-get install chromium)", chromium)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1200, 700))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	bctx, tcancel := context.WithTimeout(bctx, 60*time.Second)
	t.Cleanup(func() { tcancel(); bcancel(); acancel() })
	return bctx
}

// pageState is what the chart page exposes as window.kandle.
type pageState struct {
	Ready   bool   `json:"ready"`
	Bars    int    `json:"bars"`
	Redrawn int    `json:"redrawn"`
	Error   string `json:"error"`
}

func readPage(t *testing.T, bctx context.Context) pageState {
	t.Helper()
	st, err := chromedp.Run(bctx, chromedp.Evaluate[pageState](`window.kandle || {}`))
	if err != nil {
		t.Fatalf("evaluate: %v", err)
	}
	return st
}
