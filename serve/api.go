package serve

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// apiError is a client error: its status and a message saying what to do.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func bad(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &apiError{http.StatusNotFound, fmt.Sprintf(format, args...)}
}

func (s *Server) routes() {
	mux := http.NewServeMux()
	api := func(route string, h func(w http.ResponseWriter, r *http.Request) error) {
		mux.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			code := s.serveAPI(w, r, h)
			s.m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
			s.m.latency.WithLabelValues(route).Observe(time.Since(start).Seconds())
		})
	}
	api("/v1/candles", s.handleCandles)
	api("/v1/klines", s.handleKlines)
	api("/v1/symbols", s.handleSymbols)
	api("/v1/timeframes", s.handleTimeframes)
	api("/udf/config", s.handleUDFConfig)
	api("/udf/symbols", s.handleUDFSymbol)
	api("/udf/history", s.handleUDFHistory)
	api("/udf/time", s.handleUDFTime)
	api("/v1/devices", s.handleDevicesByStatus)
	api("/v1/devices/{id}/latest", s.handleDeviceLatest)
	api("/v1/devices/{id}/readings", s.handleDeviceReadings)
	api("/v1/devices/{id}/silences", s.handleDeviceSilences)
	api("/v1/", func(http.ResponseWriter, *http.Request) error {
		return notFound("no such endpoint; the API has /v1/candles, /v1/klines, /v1/symbols, /v1/timeframes, /v1/stream and /v1/devices (see the README's Serving section)")
	})
	api("/udf/", func(http.ResponseWriter, *http.Request) error {
		return notFound("no such endpoint; the UDF API has /udf/config, /udf/symbols, /udf/history and /udf/time")
	})
	api("/", func(http.ResponseWriter, *http.Request) error {
		return notFound("no such page; the chart is at /, the API under /v1 and /udf (see the README's Serving section)")
	})
	mux.HandleFunc("/v1/stream", s.handleStream)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	if s.o.Metrics != nil {
		mux.Handle("/metrics", s.o.Metrics)
	}
	page(mux)
	s.mux = mux
}

// serveAPI runs h with CORS, auth, the store timeout and error mapping; it
// returns the status sent.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, h func(http.ResponseWriter, *http.Request) error) int {
	if !s.cors(w, r) {
		return http.StatusNoContent
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, http.StatusMethodNotAllowed, "use GET")
		return http.StatusMethodNotAllowed
	}
	if !s.authorized(r, false) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="kandle"`)
		writeError(w, http.StatusUnauthorized, "missing or wrong bearer token: send Authorization: Bearer <token>")
		return http.StatusUnauthorized
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.o.Config.StoreTimeout)
	defer cancel()
	err := h(w, r.WithContext(ctx))
	if err == nil {
		return http.StatusOK
	}
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		writeError(w, ae.status, ae.msg)
		return ae.status
	case errors.Is(err, context.DeadlineExceeded):
		s.log.Warn("store read timed out", "path", r.URL.Path, "err", err)
		writeError(w, http.StatusGatewayTimeout, "the stores did not answer within store_timeout; retry, or ask for a shorter range")
		return http.StatusGatewayTimeout
	case r.Context().Err() != nil:
		return 499 // the client went away
	default:
		s.log.Error("store read failed", "path", r.URL.Path, "err", err)
		writeError(w, http.StatusBadGateway, "a store failed: "+err.Error())
		return http.StatusBadGateway
	}
}

func writeError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func writeJSON(w http.ResponseWriter, b []byte) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, err := w.Write(b)
	if err != nil {
		return nil // the client went away; nothing left to tell it
	}
	return nil
}

// parseTime reads epoch milliseconds or RFC 3339.
func parseTime(name, v string) (int64, error) {
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		if ms < 0 || ms > maxTime {
			return 0, bad("%s: %d is out of range (epoch milliseconds between 0 and %d)", name, ms, maxTime)
		}
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, bad("%s: %q is neither epoch milliseconds nor RFC 3339 (e.g. 2026-01-05T10:00:00Z)", name, v)
	}
	if ms := t.UnixMilli(); ms >= 0 && ms <= maxTime {
		return ms, nil
	}
	return 0, bad("%s: %q is out of range", name, v)
}

// maxTime is the latest time a request may name (year 9999).
const maxTime = 253402300799999

// series validates symbol and timeframe: a stored timeframe (base zero) or
// one built at query time from the stored timeframe base.
func (s *Server) series(ctx context.Context, symbol, tfName string) (tf, base candle.Timeframe, err error) {
	if symbol == "" {
		return tf, base, bad("symbol: required (GET /v1/symbols lists them)")
	}
	if tfName == "" {
		return tf, base, bad("timeframe: required, one of %s, or a whole multiple of one", strings.Join(s.tfs, ", "))
	}
	if tf, base, err = s.timeframe(tfName); err != nil {
		return tf, base, err
	}
	known, err := s.knownSymbol(ctx, symbol)
	if err != nil {
		return tf, base, fmt.Errorf("list symbols: %w", err)
	}
	if !known {
		return tf, base, notFound("unknown symbol %q (GET /v1/symbols lists them)", symbol)
	}
	return tf, base, nil
}

// limit reads a limit parameter: default when absent, 1..max_limit.
func (s *Server) limit(name, v string) (int, error) {
	if v == "" {
		return s.o.Config.DefaultLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > s.o.Config.MaxLimit {
		return 0, bad("%s: %q; use a whole number from 1 to %d (page with the cursor for more)", name, v, s.o.Config.MaxLimit)
	}
	return n, nil
}

// rangeOf checks [from, to) against max_range_windows.
func (s *Server) checkSpan(tf candle.Timeframe, from, to int64) error {
	if to <= from {
		return bad("the range is empty or reversed: end (%d) must be after start (%d)", to, from)
	}
	if w := windowMillis(tf); w > 0 && (to-from)/w > s.o.Config.MaxRangeWindows {
		return bad("the range spans %d windows of %s; at most %d per request (narrow it, or page with limit and the cursor)",
			(to-from)/w, tf, s.o.Config.MaxRangeWindows)
	}
	return nil
}

// cursor is a position for the next page: the remaining range and order.
type cursor struct {
	Symbol string `json:"s"`
	TF     string `json:"tf"`
	From   int64  `json:"f"`
	To     int64  `json:"t"`
	Desc   bool   `json:"d,omitempty"`
}

func (c cursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(v string) (cursor, error) {
	var c cursor
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || json.Unmarshal(b, &c) != nil || c.To <= c.From || c.From < 0 {
		return cursor{}, bad("cursor: not a cursor this API returned; start again without it")
	}
	return c, nil
}

// handleCandles is GET /v1/candles.
func (s *Server) handleCandles(w http.ResponseWriter, r *http.Request) error {
	p := r.URL.Query()
	q := query{symbol: p.Get("symbol")}
	tfName := p.Get("timeframe")
	if c := p.Get("cursor"); c != "" {
		cur, err := decodeCursor(c)
		if err != nil {
			return err
		}
		if (q.symbol != "" && q.symbol != cur.Symbol) || (tfName != "" && tfName != cur.TF) {
			return bad("cursor: it pages %s %s, not the symbol and timeframe of this request", cur.Symbol, cur.TF)
		}
		q.symbol, tfName, q.from, q.to, q.desc = cur.Symbol, cur.TF, cur.From, cur.To, cur.Desc
	}
	tf, base, err := s.series(r.Context(), q.symbol, tfName)
	if err != nil {
		return err
	}
	q.tf, q.base = tf, base
	if q.limit, err = s.limit("limit", p.Get("limit")); err != nil {
		return err
	}
	if err := q.checkDerived(); err != nil {
		return err
	}
	format := p.Get("format")
	if format != "" && format != "json" && format != "kline" {
		return bad("format: %q; use json (default) or kline", format)
	}
	if p.Get("cursor") == "" {
		start, end := p.Get("start"), p.Get("end")
		q.to = maxTime + 1
		if end != "" {
			if q.to, err = parseTime("end", end); err != nil {
				return err
			}
		}
		switch order := p.Get("order"); order {
		case "":
			q.desc = start == "" // no start: the most recent candles
		case "asc", "desc":
			q.desc = order == "desc"
		default:
			return bad("order: %q; use asc (oldest first) or desc (newest first)", order)
		}
		if start != "" {
			if q.from, err = parseTime("start", start); err != nil {
				return err
			}
			if end != "" {
				if err := s.checkSpan(tf, q.from, q.to); err != nil {
					return err
				}
			} else if q.to <= q.from {
				return bad("start is after every candle")
			}
		} else if q.to <= 0 {
			return bad("end: must be after 1970-01-01")
		}
	}
	cs, more, openFrom, err := s.candles(r.Context(), q)
	if err != nil {
		return err
	}
	var next string
	if more && len(cs) > 0 {
		last := cs[len(cs)-1]
		c := cursor{Symbol: q.symbol, TF: tf.String(), From: q.from, To: q.to, Desc: q.desc}
		if q.desc {
			c.To = last.OpenTime
		} else {
			c.From = last.OpenTime + 1
		}
		next = c.encode()
	}
	b := make([]byte, 0, 64+len(cs)*220)
	b = append(b, `{"symbol":`...)
	b = strconv.AppendQuote(b, q.symbol)
	b = append(b, `,"timeframe":"`...)
	b = append(b, tf.String()...)
	b = append(b, `","order":"`...)
	if q.desc {
		b = append(b, "desc"...)
	} else {
		b = append(b, "asc"...)
	}
	b = append(b, `","candles":[`...)
	for i := range cs {
		if i > 0 {
			b = append(b, ',')
		}
		if format == "kline" {
			b = appendKline(b, &cs[i], cs[i].OpenTime < openFrom)
		} else {
			b = AppendCandle(b, &cs[i], cs[i].OpenTime < openFrom)
		}
	}
	b = append(b, ']')
	if next != "" {
		b = append(b, `,"next_cursor":"`...)
		b = append(b, next...)
		b = append(b, '"')
	}
	b = append(b, "}\n"...)
	return writeJSON(w, b)
}

// decimalText is a price (decimal.Decimal) or a volume (decimal.Sum): both
// append their exact text.
type decimalText interface{ Append(dst []byte) []byte }

// AppendCandle writes c as the candle API answers it: the output topics' JSON shape plus "vwap" and
// "final" (see appendVWAP; final: the candle will not change again).
func AppendCandle(b []byte, c *candle.Candle, final bool) []byte {
	b = c.AppendJSON(b)
	b = append(b[:len(b)-1], `,"vwap":`...)
	b = appendVWAP(b, c)
	return append(strconv.AppendBool(append(b, `,"final":`...), final), '}')
}

// appendVWAP writes c's volume-weighted average price as a JSON string:
// quote_volume ÷ volume, exact when the quotient has at most 18 decimal
// places, else rounded half to even at the 18th; null without volume
// (gap candles).
func appendVWAP(b []byte, c *candle.Candle) []byte {
	n := len(b)
	b = append(b, '"')
	b, ok := decimal.AppendQuo(b, c.QuoteVolume, c.Volume, decimal.QuoPlaces)
	if !ok {
		return append(b[:n], "null"...)
	}
	return append(b, '"')
}

// appendKline writes c as the large exchanges' kline array: [open_time,
// "open", "high", "low", "close", "volume", close_time, "quote_volume",
// trades, "taker_buy_base_volume", "taker_buy_quote_volume", "0", final],
// close_time being the window's last millisecond (close_time - 1) as those
// APIs report it. The taker columns are null when the series has no
// aggressor side (its source maps none); the twelfth is the exchanges'
// unused column; final is kandle's.
func appendKline(b []byte, c *candle.Candle, final bool) []byte {
	b = append(b, '[')
	b = strconv.AppendInt(b, c.OpenTime, 10)
	for _, d := range []decimalText{c.Open, c.High, c.Low, c.Close, c.Volume} {
		b = append(b, ',', '"')
		b = d.Append(b)
		b = append(b, '"')
	}
	b = append(b, ',')
	b = strconv.AppendInt(b, c.CloseTime-1, 10)
	b = append(b, ',', '"')
	b = c.QuoteVolume.Append(b)
	b = append(b, '"', ',')
	b = strconv.AppendInt(b, c.Trades, 10)
	if c.Taker {
		b = append(c.TakerBuyVolume.Append(append(b, ',', '"')), '"')
		b = append(c.TakerBuyQuoteVolume.Append(append(b, ',', '"')), '"')
	} else {
		b = append(b, `,null,null`...)
	}
	b = append(b, `,"0",`...)
	b = strconv.AppendBool(b, final)
	return append(b, ']')
}

// handleKlines is GET /v1/klines, the exchanges' shape and semantics:
// symbol, interval, startTime, endTime (inclusive, epoch ms), limit; no
// startTime gives the most recent candles; always oldest first.
func (s *Server) handleKlines(w http.ResponseWriter, r *http.Request) error {
	p := r.URL.Query()
	tfName := p.Get("interval")
	if tfName == "" {
		tfName = p.Get("timeframe")
	}
	tf, base, err := s.series(r.Context(), p.Get("symbol"), tfName)
	if err != nil {
		return err
	}
	q := query{symbol: p.Get("symbol"), tf: tf, base: base, to: maxTime + 1}
	if q.limit, err = s.limit("limit", p.Get("limit")); err != nil {
		return err
	}
	if err := q.checkDerived(); err != nil {
		return err
	}
	if v := p.Get("endTime"); v != "" {
		if q.to, err = parseTime("endTime", v); err != nil {
			return err
		}
		q.to++ // endTime is inclusive
	}
	if v := p.Get("startTime"); v != "" {
		if q.from, err = parseTime("startTime", v); err != nil {
			return err
		}
		if p.Get("endTime") != "" {
			if err := s.checkSpan(tf, q.from, q.to); err != nil {
				return err
			}
		} else if q.to <= q.from {
			return bad("startTime is after every candle")
		}
	} else {
		q.desc = true // the most recent candles before endTime
	}
	cs, _, openFrom, err := s.candles(r.Context(), q)
	if err != nil {
		return err
	}
	if q.desc {
		reverse(cs)
	}
	b := append(make([]byte, 0, 2+len(cs)*200), '[')
	for i := range cs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendKline(b, &cs[i], cs[i].OpenTime < openFrom)
	}
	return writeJSON(w, append(b, "]\n"...))
}

func reverse(cs []candle.Candle) {
	for i, j := 0, len(cs)-1; i < j; i, j = i+1, j-1 {
		cs[i], cs[j] = cs[j], cs[i]
	}
}

// handleSymbols is GET /v1/symbols.
func (s *Server) handleSymbols(w http.ResponseWriter, r *http.Request) error {
	syms, err := s.symbols(r.Context())
	if err != nil {
		return err
	}
	b, _ := json.Marshal(struct {
		Symbols []string `json:"symbols"`
	}{syms})
	return writeJSON(w, append(b, '\n'))
}

// handleTimeframes is GET /v1/timeframes.
func (s *Server) handleTimeframes(w http.ResponseWriter, _ *http.Request) error {
	stored, derived := s.servedNames()
	b, _ := json.Marshal(struct {
		Timeframes []string `json:"timeframes"`
		Derived    []string `json:"derived,omitempty"`
	}{stored, derived})
	return writeJSON(w, append(b, '\n'))
}

// udfResolution maps a TradingView resolution ("1", "60", "1D", "W",
// "1M", "30S") to a served timeframe; kandle's own names work too.
func (s *Server) udfResolution(res string) (string, error) {
	if _, ok := s.o.Timeframes[res]; ok {
		return res, nil
	}
	var cands []string
	up := strings.ToUpper(res)
	num, unit := up, ""
	if n := len(up); n > 0 && (up[n-1] < '0' || up[n-1] > '9') {
		num, unit = up[:n-1], up[n-1:]
	}
	if num == "" {
		num = "1"
	}
	n, err := strconv.Atoi(num)
	if err != nil || n <= 0 {
		return "", bad("resolution: %q is not a TradingView resolution (e.g. 1, 60, 1D, 1W, 1M)", res)
	}
	switch unit {
	case "":
		cands = append(cands, fmt.Sprintf("%dm", n))
		if n%60 == 0 {
			cands = append(cands, fmt.Sprintf("%dh", n/60))
		}
		if n%1440 == 0 {
			cands = append(cands, fmt.Sprintf("%dd", n/1440))
		}
	case "S":
		cands = append(cands, fmt.Sprintf("%ds", n))
	case "D":
		cands = append(cands, fmt.Sprintf("%dd", n))
	case "W":
		cands = append(cands, fmt.Sprintf("%dw", n))
	case "M":
		cands = append(cands, fmt.Sprintf("%dM", n))
	}
	for _, c := range cands {
		if _, _, err := s.timeframe(c); err == nil {
			return c, nil // stored, or built from a stored one
		}
	}
	if len(cands) > 0 {
		_, _, err := s.timeframe(cands[0])
		return "", notFound("resolution %q: %v", res, err)
	}
	return "", notFound("resolution %q is not served; served timeframes: %s", res, strings.Join(s.tfs, ", "))
}

func udfResolutionOf(tf string) string {
	n, unit := tf[:len(tf)-1], tf[len(tf)-1:]
	switch unit {
	case "s":
		return n + "S"
	case "m":
		return n
	case "h":
		k, _ := strconv.Atoi(n)
		return strconv.Itoa(k * 60)
	case "d":
		return n + "D"
	case "w":
		return n + "W"
	}
	return n + "M"
}

// udfResolutions lists the stored timeframes and the suggested built ones
// as TradingView resolutions.
func (s *Server) udfResolutions() []string {
	stored, derived := s.servedNames()
	all := append(slices.Clone(stored), derived...)
	s.byLength(all)
	var res []string
	for _, tf := range all {
		res = append(res, udfResolutionOf(tf))
	}
	return res
}

// handleUDFConfig is GET /udf/config.
func (s *Server) handleUDFConfig(w http.ResponseWriter, _ *http.Request) error {
	res := s.udfResolutions()
	b, _ := json.Marshal(map[string]any{
		"supported_resolutions": res, "supports_search": false, "supports_group_request": false,
		"supports_marks": false, "supports_timescale_marks": false, "supports_time": true,
	})
	return writeJSON(w, append(b, '\n'))
}

// handleUDFSymbol is GET /udf/symbols?symbol=.
func (s *Server) handleUDFSymbol(w http.ResponseWriter, r *http.Request) error {
	sym := r.URL.Query().Get("symbol")
	if _, _, err := s.series(r.Context(), sym, s.tfs[0]); err != nil {
		return err
	}
	res := s.udfResolutions()
	b, _ := json.Marshal(map[string]any{
		"name": sym, "ticker": sym, "description": sym, "type": "crypto", "session": "24x7",
		"timezone": "Etc/UTC", "exchange": "kandle", "listed_exchange": "kandle", "minmov": 1,
		"pricescale": 100000000, "has_intraday": true, "has_seconds": strings.HasSuffix(s.tfs[0], "s"),
		"has_daily": true, "has_weekly_and_monthly": true, "supported_resolutions": res,
		"volume_precision": 8, "data_status": "streaming",
	})
	return writeJSON(w, append(b, '\n'))
}

// handleUDFTime is GET /udf/time: the server's time in seconds.
func (s *Server) handleUDFTime(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(strconv.FormatInt(s.o.Now().Unix(), 10)))
	return nil
}

// handleUDFHistory is GET /udf/history: symbol, resolution, from, to (Unix
// seconds, to exclusive) and countback; {s, t, o, h, l, c, v} in seconds,
// or no_data with nextTime (the newest bar before from).
func (s *Server) handleUDFHistory(w http.ResponseWriter, r *http.Request) error {
	p := r.URL.Query()
	tfName, err := s.udfResolution(p.Get("resolution"))
	if err != nil {
		return err
	}
	tf, base, err := s.series(r.Context(), p.Get("symbol"), tfName)
	if err != nil {
		return err
	}
	secs := func(name string) (int64, error) {
		v := p.Get(name)
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > maxTime/1000 {
			return 0, bad("%s: %q; use Unix seconds", name, v)
		}
		return n * 1000, nil
	}
	q := query{symbol: p.Get("symbol"), tf: tf, base: base}
	if q.from, err = secs("from"); err != nil {
		return err
	}
	if q.to, err = secs("to"); err != nil {
		return err
	}
	q.limit = s.o.Config.MaxLimit
	if q.base.N > 0 { // a built timeframe: as many bars as one request may build
		q.limit = int(min(int64(q.limit), maxDerivedReads/max(windowMillis(tf)/windowMillis(base), 1)-1))
	}
	if v := p.Get("countback"); v != "" {
		if q.limit, err = s.limit("countback", v); err != nil {
			return err
		}
		if err := q.checkDerived(); err != nil {
			return err
		}
		// countback asks for that many bars before to, wherever from is.
		q.desc, q.from = true, 0
		if q.to <= 0 {
			return bad("to: must be after 1970-01-01")
		}
	} else if err := s.checkSpan(tf, q.from, q.to); err != nil {
		return err
	}
	cs, _, openFrom, err := s.candles(r.Context(), q)
	if err != nil {
		return err
	}
	if q.desc {
		reverse(cs)
	}
	if len(cs) == 0 {
		b := []byte(`{"s":"no_data"`)
		prev, _, _, err := s.candles(r.Context(), query{symbol: q.symbol, tf: tf, base: base, from: 0, to: q.from, limit: 1, desc: true})
		if err != nil {
			return err
		}
		if len(prev) > 0 {
			b = append(b, `,"nextTime":`...)
			b = strconv.AppendInt(b, prev[0].OpenTime/1000, 10)
		}
		return writeJSON(w, append(b, "}\n"...))
	}
	b := make([]byte, 0, 32+len(cs)*120)
	b = append(b, `{"s":"ok","t":[`...)
	for i := range cs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, cs[i].OpenTime/1000, 10)
	}
	for _, f := range []struct {
		key string
		get func(*candle.Candle) decimalText
	}{{"o", func(c *candle.Candle) decimalText { return c.Open }}, {"h", func(c *candle.Candle) decimalText { return c.High }},
		{"l", func(c *candle.Candle) decimalText { return c.Low }}, {"c", func(c *candle.Candle) decimalText { return c.Close }},
		{"v", func(c *candle.Candle) decimalText { return c.Volume }}} {
		b = append(b, `],"`...)
		b = append(b, f.key...)
		b = append(b, `":[`...)
		for i := range cs {
			if i > 0 {
				b = append(b, ',')
			}
			b = f.get(&cs[i]).Append(b) // a JSON number, every digit kept
		}
	}
	b = append(b, `],"final":[`...)
	for i := range cs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendBool(b, cs[i].OpenTime < openFrom)
	}
	return writeJSON(w, append(b, "]}\n"...))
}
