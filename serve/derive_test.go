package serve

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/processors"
)

// rolledUp runs the rollup processor from → to over closed candles and
// returns what it emits: the candles a topology would store for to.
func rolledUp(t *testing.T, cs []candle.Candle, from, to candle.Timeframe) []candle.Candle {
	t.Helper()
	r, err := processors.NewRollup(processors.RollupConfig{From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	var out processors.Output
	for i := range cs {
		r.Process(processors.Record{Value: cs[i].AppendJSON(nil)}, &out)
	}
	if len(out.Rejected) > 0 {
		t.Fatalf("rollup rejected %+v", out.Rejected[0])
	}
	return out.Candles
}

// TestDerivedEqualsRollup: a timeframe built at query time equals, byte
// for byte, what the rollup processor stores for it, for random ranges,
// limits and orders paged with the cursor, and in the kline and UDF
// shapes; where it is also stored (5m from a server storing 1m and 5m),
// derived and stored answers are the same.
func TestDerivedEqualsRollup(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC) // a 3d boundary: every window below is whole
	m1 := tf(t, "1m")
	closed := series("BTC/USDT", m1, t0.UnixMilli(), 3*1440, 5) // three whole days, every fifth a gap
	for i := 120; i < 180; i++ {                                // a whole gap hour (02:00-03:00): its rollups are gap candles
		c, px := &closed[i], closed[119].Close
		c.Open, c.High, c.Low, c.Close, c.Gap, c.Trades = px, px, px, px, true, 0
		c.Volume, c.QuoteVolume = decimal.Sum{}, decimal.Sum{}
	}
	hot := NewMemory(1 << 20)
	hot.Add(closed...)
	m5 := tf(t, "5m")
	stored5 := rolledUp(t, closed, m1, m5)
	both := NewMemory(1 << 20)
	both.Add(closed...)
	both.Add(stored5...)
	url := map[string]string{}
	for name, o := range map[string]Options{
		"1m":    {Timeframes: map[string]candle.Timeframe{"1m": m1}, Hot: hot},
		"1m+5m": {Timeframes: map[string]candle.Timeframe{"1m": m1, "5m": m5}, Hot: both},
	} {
		o.Config, o.Log = defaults(t), quiet()
		o.Now = func() time.Time { return t0.Add(72 * time.Hour) }
		s, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		url[name] = start(t, s)
	}
	r := rand.New(rand.NewPCG(9, 9))
	lo, hi := t0.UnixMilli()-3_600_000, t0.Add(73*time.Hour).UnixMilli()
	for _, name := range []string{"3m", "5m", "15m", "1h", "6h", "12h", "1d", "3d"} {
		want := rolledUp(t, closed, m1, tf(t, name))
		if name == "1h" && !want[2].Gap {
			t.Fatalf("the gap hour rolled up to %+v", want[2])
		}
		per := int(windowMillis(tf(t, name)) / 60_000)
		for _, srv := range []string{"1m", "1m+5m"} {
			for i := 0; i < 12; i++ {
				from := lo + r.Int64N(hi-lo)
				to := from + 1 + r.Int64N(hi-from)
				limit := 1 + r.IntN(min(30, maxDerivedReads/per-1))
				order := []string{"asc", "desc"}[i%2]
				var exp []string
				for _, c := range want {
					if c.OpenTime >= from && c.OpenTime < to {
						exp = append(exp, string(AppendCandle(nil, &c, true)))
					}
				}
				if order == "desc" {
					slices.Reverse(exp)
				}
				q := fmt.Sprintf("%s/v1/candles?symbol=BTC%%2FUSDT&timeframe=%s&start=%d&end=%d&limit=%d&order=%s", url[srv], name, from, to, limit, order)
				var got []string
				for pages := 0; ; pages++ {
					code, body := get(t, q)
					if code != 200 || pages > len(want) {
						t.Fatalf("%s: %d %s", q, code, body)
					}
					p := decode(t, body)
					for _, c := range p.Candles {
						got = append(got, string(c))
					}
					if p.NextCursor == "" {
						break
					}
					q = url[srv] + "/v1/candles?limit=" + strconv.Itoa(limit) + "&cursor=" + p.NextCursor
				}
				if !slices.Equal(got, exp) {
					t.Fatalf("%s on %s [%d, %d) limit %d %s:\n got %d candles %.300v\nwant %d candles %.300v", name, srv, from, to, limit, order, len(got), got, len(exp), exp)
				}
			}
		}
		// Klines (the most recent page) and UDF history of the whole span.
		var kl []json.RawMessage
		code, body := get(t, fmt.Sprintf("%s/v1/klines?symbol=BTC%%2FUSDT&interval=%s&limit=5", url["1m"], name))
		if code != 200 || json.Unmarshal(body, &kl) != nil || len(kl) != min(5, len(want)) {
			t.Fatalf("klines %s: %d %s", name, code, body)
		}
		for i, k := range kl {
			if c := want[len(want)-len(kl)+i]; string(k) != string(appendKline(nil, &c, true)) {
				t.Fatalf("kline %s %d: %s, want %s", name, i, k, appendKline(nil, &c, true))
			}
		}
		var h struct {
			S string
			T []int64
		}
		from, to := t0.Add(24*time.Hour), t0.Add(48*time.Hour)
		var wantT []int64
		for _, c := range want {
			if c.OpenTime >= from.UnixMilli() && c.OpenTime < to.UnixMilli() {
				wantT = append(wantT, c.OpenTime/1000)
			}
		}
		code, body = get(t, fmt.Sprintf("%s/udf/history?symbol=BTC%%2FUSDT&resolution=%s&from=%d&to=%d", url["1m"], udfResolutionOf(name), from.Unix(), to.Unix()))
		if code != 200 || json.Unmarshal(body, &h) != nil || !slices.Equal(h.T, wantT) {
			t.Fatalf("udf history %s: %d %.300s", name, code, body)
		}
	}
	// 5m answered from storage equals 5m built from 1m.
	_, a := get(t, url["1m"]+"/v1/candles?symbol=BTC%2FUSDT&timeframe=5m&limit=200")
	_, b := get(t, url["1m+5m"]+"/v1/candles?symbol=BTC%2FUSDT&timeframe=5m&limit=200")
	if string(a) != string(b) || len(decode(t, a).Candles) != 200 {
		t.Fatalf("derived 5m differs from stored 5m:\n%.300s\n%.300s", a, b)
	}
}

// TestDerivedCalendar: days, weeks and months built at query time start
// at local midnight in the zone of the stored calendar timeframes.
func TestDerivedCalendar(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	h1 := tf(t, "1h")
	d1, err := candle.ParseTimeframe("1d", berlin)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, berlin) // across the spring DST change
	hours := series("D", h1, t0.UnixMilli(), 24*45, 3)
	days := rolledUp(t, hours, h1, d1)
	hot := NewMemory(1 << 20)
	hot.Add(hours...)
	hot.Add(days...)
	s, err := New(Options{Config: defaults(t), Log: quiet(), Timeframes: map[string]candle.Timeframe{"1h": h1, "1d": d1}, Hot: hot})
	if err != nil {
		t.Fatal(err)
	}
	u := start(t, s)
	for _, name := range []string{"3d", "1w", "1M"} {
		want, err := candle.ParseTimeframe(name, berlin)
		if err != nil {
			t.Fatal(err)
		}
		exp := rolledUp(t, days, d1, want)
		code, body := get(t, fmt.Sprintf("%s/v1/candles?symbol=D&timeframe=%s&start=0&limit=30", u, name))
		p := decode(t, body)
		// The rollup holds back the last window when the data ends inside
		// it; the query answers it as it stands.
		if code != 200 || len(p.Candles) < len(exp) || len(p.Candles) > len(exp)+1 || len(exp) == 0 {
			t.Fatalf("%s: %d, %d candles, want %d (+1): %s", name, code, len(p.Candles), len(exp), body)
		}
		for i, c := range exp {
			if string(p.Candles[i]) != string(AppendCandle(nil, &c, true)) {
				t.Fatalf("%s %d: %s\nwant %s", name, i, p.Candles[i], AppendCandle(nil, &c, true))
			}
			if lt := time.UnixMilli(c.OpenTime).In(berlin); lt.Hour() != 0 || lt.Minute() != 0 {
				t.Fatalf("%s opens at %v", name, lt)
			}
		}
	}
}

// TestFinalAndVWAP: every answer says which candles are final: the open
// window is not, nor a built candle holding it; VWAP is quote volume ÷
// volume (exact, or half-even at 18 places), null without volume.
func TestFinalAndVWAP(t *testing.T) {
	f := newFixture(t, nil)
	code, body := get(t, f.url+"/v1/candles?symbol=BTC%2FUSDT&timeframe=3m&limit=2")
	var p struct {
		Candles []struct {
			OpenTime int64 `json:"open_time"`
			Final    bool
			VWAP     *string
		}
	}
	open := f.truth[len(f.truth)-1]
	if code != 200 || json.Unmarshal(body, &p) != nil || len(p.Candles) != 2 || p.Candles[0].Final || !p.Candles[1].Final ||
		p.Candles[0].OpenTime != tf(t, "3m").Start(open.OpenTime) {
		t.Fatalf("3m with the open window: %d %s", code, body)
	}
	code, body = get(t, f.url+"/v1/klines?symbol=BTC%2FUSDT&interval=3m&limit=2")
	if code != 200 || !strings.HasSuffix(string(body), `"0",false]]`+"\n") || !strings.Contains(string(body), `"0",true],[`) {
		t.Fatalf("3m klines: %s", body)
	}
	c := candle.Candle{Symbol: "X", Timeframe: "1m", Volume: decimal.MustParseSum("3"), QuoteVolume: decimal.MustParseSum("65.25"),
		Open: decimal.MustParse("1"), High: decimal.MustParse("1"), Low: decimal.MustParse("1"), Close: decimal.MustParse("1")}
	if got := string(AppendCandle(nil, &c, true)); !strings.HasSuffix(got, `,"vwap":"21.75","final":true}`) {
		t.Fatalf("vwap: %s", got)
	}
	c.QuoteVolume = decimal.MustParseSum("20")
	if got := string(AppendCandle(nil, &c, false)); !strings.HasSuffix(got, `,"vwap":"6.666666666666666667","final":false}`) {
		t.Fatalf("vwap rounded: %s", got)
	}
	c.Volume, c.QuoteVolume, c.Gap = decimal.Sum{}, decimal.Sum{}, true
	if got := string(AppendCandle(nil, &c, true)); !strings.HasSuffix(got, `,"vwap":null,"final":true}`) {
		t.Fatalf("gap vwap: %s", got)
	}
}
