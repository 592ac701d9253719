package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"
)

// chromium is Debian's browser, installed by scripts/test-deps.sh.
const chromium = "/usr/bin/chromium"

// TestChartPageInBrowser runs the quick start (kandle demo, which serves
// the chart page) and opens the printed URL in a real headless Chromium:
// the page loads, draws exactly the candles the API returns, and its last
// candle moves when a new trade is produced.
func TestChartPageInBrowser(t *testing.T) {
	if _, err := exec.LookPath(chromium); err != nil {
		t.Fatalf("%s not found: the chart page test needs Debian's chromium; run scripts/test-deps.sh (or apt-get install chromium)", chromium)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out sxBuffer
	var wg sync.WaitGroup
	wg.Go(func() {
		realMain(ctx, []string{"demo", "-serve", "127.0.0.1:0", "-backlog", "20m", "-backlog-trades", "3000", "-rate", "2"}, &out, &out)
	})
	defer func() { cancel(); wg.Wait() }()

	// The demo prints the broker and the chart's URL.
	var broker, page string
	urlRE := regexp.MustCompile(`live chart at (http://\S+)`)
	brokerRE := regexp.MustCompile(`on the embedded broker (\S+);`)
	for deadline := time.Now().Add(60 * time.Second); page == ""; {
		if m := urlRE.FindStringSubmatch(out.String()); m != nil {
			page = m[1]
			broker = brokerRE.FindStringSubmatch(out.String())[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("the demo printed no chart URL:\n%s", out.String())
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	const sym = "BTC-USD"
	api := func() (n int, newest int64) {
		resp, err := http.Get(page + "v1/candles?symbol=" + url.QueryEscape(sym) + "&timeframe=1m&limit=1000&order=desc")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p struct {
			Candles []struct {
				OpenTime int64 `json:"open_time"`
			} `json:"candles"`
		}
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&p) != nil {
			return 0, 0
		}
		if len(p.Candles) == 0 {
			return 0, 0
		}
		return len(p.Candles), p.Candles[0].OpenTime
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
		if n, _ := api(); n >= 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API never had 10 candles of %s:\n%s", sym, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1200, 700))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	bctx, tcancel := context.WithTimeout(bctx, 90*time.Second)
	defer tcancel()

	type state struct {
		Ready      bool    `json:"ready"`
		Bars       int     `json:"bars"`
		Updates    int     `json:"updates"`
		Error      string  `json:"error"`
		Symbol     string  `json:"symbol"`
		Panes      int     `json:"panes"`
		VolumeBars int     `json:"volumeBars"`
		LastVolume float64 `json:"lastVolume"`
		Legend     string  `json:"legend"`
		Last       *struct {
			Time  int64   `json:"time"`
			High  float64 `json:"high"`
			Close float64 `json:"close"`
		} `json:"last"`
	}
	read := func() state {
		s, err := chromedp.Run(bctx, chromedp.Evaluate[state](`window.kandle || {}`))
		if err != nil {
			t.Fatalf("evaluate: %v", err)
		}
		return s
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(page+"?symbol="+sym+"&timeframe=1m")); err != nil {
		t.Fatalf("open %s: %v", page, err)
	}
	var s state
	for deadline := time.Now().Add(30 * time.Second); ; {
		s = read()
		if s.Error != "" {
			t.Fatalf("the page reports: %s", s.Error)
		}
		if s.Ready && s.Bars > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the chart never drew candles: %+v", s)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The chart holds what the API returns (compared while no window
	// closes in between).
	for deadline := time.Now().Add(30 * time.Second); ; {
		n1, newest1 := api()
		s = read()
		n2, newest2 := api()
		if n1 == n2 && newest1 == newest2 && s.Bars == n1 && s.Last != nil && s.Last.Time*1000 == newest1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("chart has %d bars (last %+v), API %d (newest %d)", s.Bars, s.Last, n1, newest1)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The volume pane holds one bar per candle; the legend shows the
	// newest candle's exact fields, taker buy volume included.
	if s.Panes != 2 || s.VolumeBars != s.Bars || s.LastVolume <= 0 || !strings.Contains(s.Legend, " V ") || !strings.Contains(s.Legend, "VWAP ") ||
		!strings.Contains(s.Legend, " taker buy ") { // the demo's trades carry a side
		t.Fatalf("volume pane and legend: %+v", s)
	}
	// A gap candle is drawn flat and grey, its volume bar grey and empty.
	type drawn struct {
		Bar struct {
			Open, High, Low, Close float64
			Color, WickColor       string
		}
		Volume struct {
			Value float64
			Color string
		}
	}
	g, err := chromedp.Run(bctx, chromedp.Evaluate[drawn](`window.kandle.draw({open_time: 60000, open: "5", high: "5", low: "5", close: "5", volume: "0", quote_volume: "0", trades: 0, gap: true, vwap: null, final: true})`))
	if err != nil || g.Bar.Color != "#787b86" || g.Bar.WickColor != "#787b86" || g.Bar.High != g.Bar.Low || g.Volume.Value != 0 || g.Volume.Color != "#787b86" {
		t.Fatalf("a gap candle is drawn as %+v (%v)", g, err)
	}
	shot(t, bctx, "chart-loaded.png")

	// A new trade far above the market moves the last candle.
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const spike = 987654.25
	v := fmt.Sprintf(`{"symbol":%q,"ts":%d,"price":"%v","qty":"0.01","trade_id":"browser-test","side":"buy"}`, sym, time.Now().UnixMilli(), spike)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "trades", Key: []byte(sym), Value: []byte(v)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		s = read()
		if s.Last != nil && s.Last.High == spike && s.Updates > 0 && s.LastVolume > 0 && s.VolumeBars == s.Bars {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the chart did not move to the new trade: %+v last %+v", s, s.Last)
		}
		time.Sleep(100 * time.Millisecond)
	}
	shot(t, bctx, "chart-moved.png")
}

// shot saves a screenshot of the page as a test artifact: under
// $KANDLE_ARTIFACTS when set, else in the test's artifact directory (kept
// with go test -artifacts -outputdir DIR).
func shot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("KANDLE_ARTIFACTS")
	if dir == "" {
		dir = t.ArtifactDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}
