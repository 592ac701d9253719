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
// the page loads, draws exactly the candles the API returns, gap candles
// among them (the backlog is sparse, so the processor fills silent
// minutes) flat and grey, its last candle moves when a new trade is
// produced, and a window's final, which arrives after the next window
// opened, redraws that older bar.
func TestChartPageInBrowser(t *testing.T) {
	if _, err := exec.LookPath(chromium); err != nil {
		t.Fatalf("%s not found: the chart page test needs Debian's chromium; run scripts/test-deps.sh (or apt-get install chromium)", chromium)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out sxBuffer
	var wg sync.WaitGroup
	wg.Go(func() {
		realMain(ctx, []string{"demo", "-serve", "127.0.0.1:0", "-backlog", "20m", "-backlog-trades", "60", "-rate", "2"}, &out, &out)
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
	// candles returns the API's candles of sym, newest first.
	type apiCandle struct {
		OpenTime int64  `json:"open_time"`
		Open     string `json:"open"`
		High     string `json:"high"`
		Low      string `json:"low"`
		Close    string `json:"close"`
		Volume   string `json:"volume"`
		Trades   int64  `json:"trades"`
		Gap      bool   `json:"gap"`
		Final    bool   `json:"final"`
	}
	candles := func() []apiCandle {
		resp, err := http.Get(page + "v1/candles?symbol=" + url.QueryEscape(sym) + "&timeframe=1m&limit=1000&order=desc")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p struct {
			Candles []apiCandle `json:"candles"`
		}
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&p) != nil {
			return nil
		}
		return p.Candles
	}
	api := func() (n int, newest int64) {
		cs := candles()
		if len(cs) == 0 {
			return 0, 0
		}
		return len(cs), cs[0].OpenTime
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
	// Each step below has its own deadline; this bound only stops a hung
	// browser. It covers them all, the wait for the next minute included.
	bctx, tcancel := context.WithTimeout(bctx, 5*time.Minute)
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
		Redrawn    int     `json:"redrawn"`
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
	// The gap candles the processor made for the silent minutes are drawn
	// flat and grey at their close, their volume bars grey and empty; the
	// candles with trades are not grey.
	type drawn struct {
		Bar *struct {
			Open, High, Low, Close float64
			Color, WickColor       string
		}
		Candle *apiCandle
		Volume *struct {
			Value float64
			Color string
		}
	}
	at := func(openTime int64) drawn {
		d, err := chromedp.Run(bctx, chromedp.Evaluate[drawn](fmt.Sprintf(`window.kandle.drawn(%d)`, openTime/1000)))
		if err != nil {
			t.Fatalf("evaluate: %v", err)
		}
		if d.Bar == nil || d.Candle == nil || d.Volume == nil {
			t.Fatalf("the chart has no bar at %d", openTime)
		}
		return d
	}
	const grey = "#787b86"
	gaps, others := 0, 0
	for _, c := range candles() {
		if !c.Final {
			continue
		}
		d := at(c.OpenTime)
		if d.Candle.OpenTime != c.OpenTime || d.Candle.Gap != c.Gap || d.Candle.Close != c.Close {
			t.Fatalf("the bar at %d holds %+v; the API has %+v", c.OpenTime, *d.Candle, c)
		}
		if !c.Gap {
			others++
			if d.Bar.Color == grey || d.Volume.Color == grey {
				t.Fatalf("a candle with trades is drawn grey: %+v %+v", d.Bar, d.Volume)
			}
			continue
		}
		gaps++
		if c.Open != c.Close || c.High != c.Close || c.Low != c.Close || c.Volume != "0" || c.Trades != 0 {
			t.Fatalf("the API's gap candle is not flat: %+v", c)
		}
		if d.Bar.Color != grey || d.Bar.WickColor != grey || d.Bar.Open != d.Bar.Close || d.Bar.High != d.Bar.Close ||
			d.Bar.Low != d.Bar.Close || d.Volume.Value != 0 || d.Volume.Color != grey {
			t.Fatalf("the gap candle at %d is drawn as %+v, volume %+v", c.OpenTime, d.Bar, d.Volume)
		}
	}
	if gaps == 0 || others == 0 {
		t.Fatalf("want gap candles and candles with trades among the finals of %s; got %d and %d:\n%s", sym, gaps, others, out.String())
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

	// When the next minute opens, the spike's window gets its final after
	// the new window's first update: the chart redraws that older bar
	// (final, with every trade of the API's candle) instead of dropping it.
	spikeOpen := s.Last.Time * 1000
	for deadline := time.Now().Add(90 * time.Second); ; {
		s = read()
		var final *apiCandle
		for _, c := range candles() {
			if c.OpenTime == spikeOpen && c.Final {
				final = &c
			}
		}
		if d := at(spikeOpen); final != nil && s.Redrawn > 0 && s.Last.Time*1000 > spikeOpen &&
			d.Candle.Final && d.Candle.Trades == final.Trades && d.Candle.Close == final.Close && d.Bar.High == spike {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the spike's bar was not redrawn as final: %+v last %+v, bar %+v, API final %+v", s, s.Last, at(spikeOpen).Bar, final)
		}
		time.Sleep(200 * time.Millisecond)
	}
	shot(t, bctx, "chart-final.png")

	// The timeframe picker offers the timeframes the server builds from
	// stored ones (the list /v1/timeframes gives); picking one draws what
	// the API builds.
	resp, err := http.Get(page + "v1/timeframes")
	if err != nil {
		t.Fatal(err)
	}
	var served struct{ Timeframes, Derived []string }
	err = json.NewDecoder(resp.Body).Decode(&served)
	resp.Body.Close()
	if err != nil || len(served.Derived) == 0 {
		t.Fatalf("/v1/timeframes: %+v %v", served, err)
	}
	picker, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#timeframe option")).map((o) => o.value)`))
	if err != nil || strings.Join(picker, ",") != strings.Join(append(served.Timeframes, served.Derived...), ",") {
		t.Fatalf("the picker offers %v (%v); the server serves %+v", picker, err, served)
	}
	pick, before := served.Derived[0], read().Updates
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const s = document.getElementById("timeframe"); s.value = %q; s.dispatchEvent(new Event("change")); return true; })()`, pick))); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		s = read()
		resp, err := http.Get(page + "v1/candles?symbol=" + url.QueryEscape(sym) + "&timeframe=" + pick + "&limit=1000&order=desc")
		if err != nil {
			t.Fatal(err)
		}
		var p struct{ Candles []apiCandle }
		err = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		// Bars as the API builds them, then live updates of the built bar.
		if err == nil && len(p.Candles) > 0 && s.Bars == len(p.Candles) && s.Last != nil && s.Last.Time*1000 == p.Candles[0].OpenTime && s.Updates > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the chart at %s has %d bars (last %+v, %d updates); the API %d (%v)", pick, s.Bars, s.Last, s.Updates-before, len(p.Candles), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	shot(t, bctx, "chart-derived.png")
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
