package serve

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
)

// fixture is a server over three in-memory stores shaped like the real
// ones: the cold store holds only what is older than the hot horizon, the
// hot store a little more than the horizon (TTL deletes lag), the live
// store the open window. Any routing mistake loses candles.
type fixture struct {
	url   string
	truth []candle.Candle // closed candles, then the open one
	now   time.Time
}

func newFixture(t *testing.T, mutate func(*Options)) fixture {
	s, truth, now := fixtureServer(t, mutate)
	return fixture{url: start(t, s), truth: truth, now: now}
}

// fixtureServer builds the fixture's server without serving it.
func fixtureServer(t testing.TB, mutate func(*Options)) (*Server, []candle.Candle, time.Time) {
	now := time.Date(2026, 11, 25, 12, 0, 30, 0, time.UTC)
	m1 := tf(t, "1m")
	closed := series("BTC/USDT", m1, now.Add(-3000*time.Minute).UnixMilli(), 3000, 1)
	open := series("BTC/USDT", m1, now.UnixMilli(), 1, 2)[0]
	horizon := 1000 * time.Minute
	b := now.Add(-horizon).UnixMilli()
	hot, cold, live := NewMemory(1<<20), NewMemory(1<<20), NewMemory(10)
	for _, c := range closed {
		if c.OpenTime < b {
			cold.Add(c)
		}
		if c.OpenTime >= b-30*60_000 {
			hot.Add(c)
		}
	}
	live.Active(open)
	cfg := defaults(t)
	cfg.HotHorizon = horizon
	o := Options{Config: cfg, Timeframes: map[string]candle.Timeframe{"1m": m1, "5m": tf(t, "5m")},
		Hot: hot, Cold: cold, Live: live, Feed: live, Now: func() time.Time { return now }, Log: quiet()}
	if mutate != nil {
		mutate(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s, append(closed, open), now
}

// TestCandlesEqualTruth: for many random ranges, limits and orders, paging
// through /v1/candles with the cursor returns exactly the candles of the
// range (closed and open), in order, byte for byte in the output topics'
// JSON shape, across the hot/cold boundary; also where both stores are read
// before the boundary (a revision horizon as long as what the hot store
// holds beyond it), whose candles then come from either.
func TestCandlesEqualTruth(t *testing.T) {
	t.Run("split", func(t *testing.T) { candlesEqualTruth(t, nil) })
	t.Run("overlap", func(t *testing.T) {
		candlesEqualTruth(t, func(o *Options) { o.ReviseWithin = 30 * time.Minute })
	})
}

func candlesEqualTruth(t *testing.T, mutate func(*Options)) {
	f := newFixture(t, mutate)
	r := rand.New(rand.NewPCG(3, 4))
	lo, hi := f.truth[0].OpenTime-10*60_000, f.truth[len(f.truth)-1].CloseTime+10*60_000
	for i := 0; i < 150; i++ {
		from := lo + r.Int64N(hi-lo)
		to := from + 1 + r.Int64N(hi-from)
		limit := 1 + r.IntN(1000)
		if i%3 == 0 {
			limit = 1 + r.IntN(20) // many pages
		}
		order := []string{"asc", "desc"}[r.IntN(2)]
		var want []string
		for _, c := range f.truth {
			if c.OpenTime >= from && c.OpenTime < to {
				want = append(want, string(AppendCandle(nil, &c, c.OpenTime < f.truth[len(f.truth)-1].OpenTime)))
			}
		}
		if order == "desc" {
			slices.Reverse(want)
		}
		var got []string
		q := fmt.Sprintf("%s/v1/candles?symbol=%s&timeframe=1m&start=%d&end=%d&limit=%d&order=%s",
			f.url, url.QueryEscape("BTC/USDT"), from, to, limit, order)
		for pages := 0; ; pages++ {
			code, body := get(t, q)
			if code != 200 {
				t.Fatalf("%s: %d %s", q, code, body)
			}
			p := decode(t, body)
			if len(p.Candles) > limit {
				t.Fatalf("%s: %d candles, limit %d", q, len(p.Candles), limit)
			}
			for _, c := range p.Candles {
				got = append(got, string(c))
			}
			if p.NextCursor == "" {
				break
			}
			if pages > 5000 {
				t.Fatal("cursor never ends")
			}
			q = fmt.Sprintf("%s/v1/candles?cursor=%s&limit=%d", f.url, p.NextCursor, limit)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("range [%d, %d) limit %d %s: got %d candles, want %d\nfirst got  %.200s\nfirst want %.200s",
				from, to, limit, order, len(got), len(want), first(got), first(want))
		}
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return "(none)"
	}
	return s[0]
}

// TestMostRecent: without a range, /v1/candles and /v1/klines give the
// newest candles (the open window included); klines oldest first.
func TestMostRecent(t *testing.T) {
	f := newFixture(t, nil)
	n := len(f.truth)
	code, body := get(t, f.url+"/v1/candles?symbol=BTC%2FUSDT&timeframe=1m&limit=3")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	p := decode(t, body)
	if p.Order != "desc" || len(p.Candles) != 3 || string(p.Candles[0]) != string(AppendCandle(nil, &f.truth[n-1], false)) ||
		string(p.Candles[2]) != string(AppendCandle(nil, &f.truth[n-3], true)) || p.NextCursor == "" {
		t.Fatalf("newest page: %s", body)
	}
	code, body = get(t, f.url+"/v1/klines?symbol=BTC%2FUSDT&interval=1m&limit=2")
	c1, c2 := f.truth[n-2], f.truth[n-1]
	want := "[" + string(appendKline(nil, &c1, true)) + "," + string(appendKline(nil, &c2, false)) + "]\n"
	if code != 200 || string(body) != want {
		t.Fatalf("klines: %d\ngot  %s\nwant %s", code, body, want)
	}
	if !strings.Contains(want, fmt.Sprintf(`[%d,"%s","%s","%s","%s","%s",%d,"%s",%d,"%s","%s","0",true]`, c1.OpenTime, c1.Open, c1.High, c1.Low, c1.Close, c1.Volume, c1.CloseTime-1, c1.QuoteVolume, c1.Trades,
		c1.TakerBuyVolume, c1.TakerBuyQuoteVolume)) || !c1.Taker {
		t.Fatalf("kline shape: %s", want)
	}
	// A series without an aggressor side: the taker columns are null.
	c1.Taker = false
	if k := string(appendKline(nil, &c1, true)); !strings.HasSuffix(k, fmt.Sprintf(`,%d,null,null,"0",true]`, c1.Trades)) {
		t.Fatalf("kline without taker volumes: %s", k)
	}
	// startTime/endTime are inclusive epoch ms, oldest first.
	a, b := f.truth[10], f.truth[12]
	code, body = get(t, fmt.Sprintf("%s/v1/klines?symbol=BTC%%2FUSDT&interval=1m&startTime=%d&endTime=%d", f.url, a.OpenTime, b.OpenTime))
	if code != 200 || strings.Count(string(body), "],[")+1 != 3 || !strings.HasPrefix(string(body), fmt.Sprintf("[[%d,", a.OpenTime)) {
		t.Fatalf("klines range: %d %s", code, body)
	}
}

// TestUDF: TradingView's /history in seconds with numbers, no_data with
// nextTime, countback, and the resolution mapping.
func TestUDF(t *testing.T) {
	f := newFixture(t, nil)
	a := f.truth[100]
	code, body := get(t, fmt.Sprintf("%s/udf/history?symbol=BTC%%2FUSDT&resolution=1&from=%d&to=%d", f.url, a.OpenTime/1000, a.OpenTime/1000+120))
	want := fmt.Sprintf(`{"s":"ok","t":[%d,%d],"o":[%s,%s],"h":[%s,%s],"l":[%s,%s],"c":[%s,%s],"v":[%s,%s],"final":[true,true]}`+"\n",
		a.OpenTime/1000, a.OpenTime/1000+60, a.Open, f.truth[101].Open, a.High, f.truth[101].High, a.Low, f.truth[101].Low,
		a.Close, f.truth[101].Close, a.Volume, f.truth[101].Volume)
	if code != 200 || string(body) != want {
		t.Fatalf("history: %d\ngot  %s\nwant %s", code, body, want)
	}
	before := f.truth[0].OpenTime/1000 - 3600
	code, body = get(t, fmt.Sprintf("%s/udf/history?symbol=BTC%%2FUSDT&resolution=1&from=%d&to=%d", f.url, before, before+60))
	if code != 200 || string(body) != `{"s":"no_data"}`+"\n" {
		t.Fatalf("no_data before history: %d %s", code, body)
	}
	gapFrom := f.now.Unix() + 3600
	code, body = get(t, fmt.Sprintf("%s/udf/history?symbol=BTC%%2FUSDT&resolution=1&from=%d&to=%d", f.url, gapFrom, gapFrom+60))
	last := f.truth[len(f.truth)-1]
	if code != 200 || string(body) != fmt.Sprintf(`{"s":"no_data","nextTime":%d}`+"\n", last.OpenTime/1000) {
		t.Fatalf("no_data with nextTime: %d %s", code, body)
	}
	code, body = get(t, fmt.Sprintf("%s/udf/history?symbol=BTC%%2FUSDT&resolution=1&from=0&to=%d&countback=2", f.url, f.now.Unix()+60))
	if code != 200 || !strings.HasPrefix(string(body), fmt.Sprintf(`{"s":"ok","t":[%d,%d]`, f.truth[len(f.truth)-2].OpenTime/1000, last.OpenTime/1000)) {
		t.Fatalf("countback: %d %s", code, body)
	}
	if code, body = get(t, f.url+"/udf/history?symbol=BTC%2FUSDT&resolution=45S&from=0&to=60"); code != 404 || !strings.Contains(string(body), "finer than the finest stored timeframe 1m") {
		t.Fatalf("unserved resolution: %d %s", code, body)
	}
	if code, body = get(t, f.url+"/udf/config"); code != 200 || !strings.Contains(string(body), `"supported_resolutions":["1","3","5","15","30","60","120","240","360","720","1D","3D","1W","1M"]`) {
		t.Fatalf("config: %d %s", code, body)
	}
}

// TestBadInput: every malformed request is a 4xx with a message.
func TestBadInput(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Config.MaxRangeWindows = 10_000 })
	cases := []struct {
		q    string
		code int
		msg  string
	}{
		{"/v1/candles?timeframe=1m", 400, "symbol: required"},
		{"/v1/candles?symbol=BTC%2FUSDT", 400, "timeframe: required"},
		{"/v1/candles?symbol=NOPE&timeframe=1m", 404, "unknown symbol"},
		{"/v1/candles?symbol=BTC%2FUSDT&timeframe=90s", 404, "not a whole multiple of a stored timeframe"},
		{"/v1/candles?symbol=BTC%2FUSDT&timeframe=30s", 404, "finer than the finest stored timeframe 1m"},
		{"/v1/candles?symbol=BTC%2FUSDT&timeframe=2w", 404, "weeks and months take a count of 1"},
		{"/v1/candles?symbol=BTC%2FUSDT&timeframe=1d&limit=1000", 400, "ask for limit ≤ 33"},
		{"/v1/klines?symbol=BTC%2FUSDT&interval=3d&limit=20", 400, "ask for limit ≤ 10"},
		{"/v1/candles?symbol=BTC%2FUSDT&timeframe=1m&start=2000&end=1000", 400, "reversed"},
		{"/v1/candles?symbol=BTC%2FUSDT&timeframe=1m&start=0&end=99999999999", 400, "at most 10000"},
		{"/v1/candles?symbol=BTC%2FUSDT&timeframe=1m&start=yesterday", 400, "neither epoch milliseconds nor RFC 3339"},
		{"/v1/candles?symbol=BTC%2FUSDT&timeframe=1m&limit=0", 400, "from 1 to 1000"},
		{"/v1/candles?symbol=BTC%2FUSDT&timeframe=1m&limit=1001", 400, "from 1 to 1000"},
		{"/v1/candles?symbol=BTC%2FUSDT&timeframe=1m&limit=abc", 400, "from 1 to 1000"},
		{"/v1/candles?symbol=BTC%2FUSDT&timeframe=1m&order=up", 400, "order"},
		{"/v1/candles?symbol=BTC%2FUSDT&timeframe=1m&format=csv", 400, "format"},
		{"/v1/candles?cursor=!!!", 400, "cursor"},
		{"/v1/candles?cursor=eyJzIjoiQlRDL1VTRFQiLCJ0ZiI6IjFtIiwiZiI6NSwidCI6MX0", 400, "cursor"},
		{"/v1/candles?symbol=BTC%2FUSDT&timeframe=1m&start=-5", 400, "out of range"},
		{"/v1/klines?symbol=BTC%2FUSDT&interval=1m&startTime=5&endTime=1", 400, "reversed"},
		{"/udf/history?symbol=BTC%2FUSDT&resolution=1&from=x&to=1", 400, "Unix seconds"},
		{"/udf/history?symbol=BTC%2FUSDT&resolution=banana&from=0&to=1", 400, "resolution"},
	}
	for _, c := range cases {
		code, body := get(t, f.url+c.q)
		if code != c.code || !strings.Contains(string(body), c.msg) || !strings.HasPrefix(string(body), `{"error":`) {
			t.Errorf("%s: got %d %s; want %d with %q", c.q, code, body, c.code, c.msg)
		}
	}
	// A cursor of another series is refused.
	_, body := get(t, f.url+"/v1/candles?symbol=BTC%2FUSDT&timeframe=1m&limit=1")
	cur := decode(t, body).NextCursor
	if code, body := get(t, f.url+"/v1/candles?symbol=ETH&timeframe=1m&cursor="+cur); code != 400 || !strings.Contains(string(body), "cursor") {
		t.Errorf("foreign cursor: %d %s", code, body)
	}
	// RFC 3339 works as well as epoch ms.
	a := f.truth[5]
	rfc := time.UnixMilli(a.OpenTime).UTC().Format(time.RFC3339)
	code, body := get(t, f.url+"/v1/candles?symbol=BTC%2FUSDT&timeframe=1m&limit=1&start="+rfc)
	if p := decode(t, body); code != 200 || len(p.Candles) != 1 || string(p.Candles[0]) != string(AppendCandle(nil, &a, true)) {
		t.Errorf("RFC 3339 start: %d %s", code, body)
	}
}

// TestAuthAndCORS: with a token every API call needs it; allowed origins
// get CORS headers, others do not; the chart page stays public.
func TestAuthAndCORS(t *testing.T) {
	f := newFixture(t, func(o *Options) {
		o.AuthToken = "s3cret"
		o.Config.CORSOrigins = []string{"https://charts.example.com"}
	})
	q := f.url + "/v1/timeframes"
	if code, body := get(t, q); code != 401 || !strings.Contains(string(body), "bearer token") {
		t.Fatalf("no token: %d %s", code, body)
	}
	if code, _ := get(t, q, "Authorization", "Bearer wrong"); code != 401 {
		t.Fatalf("wrong token: %d", code)
	}
	if code, body := get(t, q, "Authorization", "Bearer s3cret"); code != 200 || string(body) != `{"timeframes":["1m","5m"],"derived":["3m","15m","30m","1h","2h","4h","6h","12h","1d","3d","1w","1M"]}`+"\n" {
		t.Fatalf("token: %d %s", code, body)
	}
	if code, _ := get(t, f.url+"/"); code != 200 {
		t.Fatalf("chart page: %d", code)
	}
	req := func(origin string) string {
		t.Helper()
		r, _ := newReq(q, "Authorization", "Bearer s3cret", "Origin", origin)
		return r.Header.Get("Access-Control-Allow-Origin")
	}
	if got := req("https://charts.example.com"); got != "https://charts.example.com" {
		t.Errorf("allowed origin: %q", got)
	}
	if got := req("https://evil.example.com"); got != "" {
		t.Errorf("other origin got %q", got)
	}
}
