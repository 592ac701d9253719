package serve

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// checkAnswer fails t unless the answer to a request is a success or a 4xx
// whose JSON error says something: never a 5xx, never a bare status.
func checkAnswer(t *testing.T, target string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("GET %q: %d %s", target, rec.Code, rec.Body)
	}
	if rec.Code >= 400 {
		var e struct{ Error string }
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" || json.Unmarshal(rec.Body.Bytes(), &e) != nil || len(e.Error) < 10 {
			t.Fatalf("GET %q: %d without a JSON error saying what to do (%s): %s", target, rec.Code, ct, rec.Body)
		}
	}
}

// requestOf turns fuzz bytes into a GET request, as the HTTP server would
// parse its request line; ok is false for bytes no server passes on.
func requestOf(target string) (*http.Request, bool) {
	u, err := url.ParseRequestURI(target)
	if err != nil || strings.ContainsAny(target, " \r\n") {
		return nil, false
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.URL, r.RequestURI = u, target
	return r, true
}

// FuzzCandleRequests: whatever path and query a client sends to the candle
// API (symbols, timeframes stored or built, times, limits, cursors,
// orders, UDF resolutions), the answer is a 2xx or a 4xx with a JSON error,
// never a 5xx or a crash.
func FuzzCandleRequests(f *testing.F) {
	for _, s := range []string{
		"/v1/candles?symbol=BTC%2FUSDT&timeframe=1m",
		"/v1/candles?symbol=BTC%2FUSDT&timeframe=3m&start=1795000000000&limit=7&order=asc",
		"/v1/candles?symbol=BTC%2FUSDT&timeframe=1d&limit=33",
		"/v1/candles?symbol=BTC%2FUSDT&timeframe=99999999999999999999m",
		"/v1/candles?symbol=BTC%2FUSDT&timeframe=1M&start=0&end=253402300799999",
		"/v1/candles?symbol=BTC%2FUSDT&timeframe=2h&end=1",
		"/v1/candles?cursor=eyJzIjoiQlRDL1VTRFQiLCJ0ZiI6IjNtIiwiZiI6MCwidCI6OTk5OTk5OTk5OTk5OX0",
		"/v1/candles?symbol=%ff%00&timeframe=0m",
		"/v1/klines?symbol=BTC%2FUSDT&interval=6h&startTime=-1&endTime=9223372036854775807",
		"/v1/klines?symbol=BTC%2FUSDT&interval=12h&limit=69",
		"/udf/history?symbol=BTC%2FUSDT&resolution=3D&from=0&to=9999999999&countback=5",
		"/udf/history?symbol=BTC%2FUSDT&resolution=-5&from=0&to=1",
		"/udf/symbols?symbol=BTC%2FUSDT",
		"/v1/timeframes", "/udf/config", "/v1/nope", "/v1/devices/x/latest",
	} {
		f.Add(s)
	}
	s, _, _ := fixtureServer(f, nil)
	f.Fuzz(func(t *testing.T, target string) {
		r, ok := requestOf(target)
		if !ok {
			return
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, r)
		if strings.HasPrefix(r.URL.Path, "/v1/") || strings.HasPrefix(r.URL.Path, "/udf/") {
			checkAnswer(t, target, rec)
		}
	})
}
