package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/dynamodb"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/topology"
)

// runKandle runs one command in process and returns its output and exit code.
func runKandle(t testing.TB, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = realMain(context.Background(), args, &o, &e)
	return o.String(), e.String(), code
}

func writeFile(t testing.TB, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const tablesTopology = `
name: tables
brokers: [127.0.0.1:1]
metrics: ""
sources:
  trades: {topic: trades, partitions: 1}
  devices: {topic: devices, partitions: 1}
processors:
  1m: {kind: candles, from: trades, timeframe: 1m}
sinks:
  history:
    kind: dynamodb
    from: [1m]
    endpoint: %[1]s
    table:
      name: candles
      ttl_attribute: expires_at
      gsis:
        by_timeframe: {pk: timeframe, pk_type: S, sk: open_time, sk_type: N, projection: KEYS_ONLY}
      lsis:
        by_close: {sk: close_time, sk_type: N}
    pk: "{symbol}#{timeframe}"
    sk: "{open_time}"
    ttl_by_timeframe: {1m: 7d}
  again:
    kind: dynamodb
    from: [1m]
    endpoint: %[1]s
    table: {name: candles}
    pk: "{symbol}#{timeframe}"
    sk: "{open_time}"
  readings:
    kind: dynamodb
    from: devices
    endpoint: %[1]s
    table: {name: readings}
    pk: "{symbol}#{shard}"
    sk: "{ts}"
    shards: 4
`

// tables apply creates the declared tables once; a second run and a dry run
// change nothing. kandle query then reads what a sink wrote, in each of the
// access patterns of docs/contract.md ("What the stores hold").
func TestTablesApplyAndQuery(t *testing.T) {
	ddb := testkit.Dynalite(t)
	top := writeFile(t, "tables.yaml", fmt.Sprintf(tablesTopology, ddb.URL()))

	out, errOut, code := runKandle(t, "tables", "apply", "-t", top, "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run: nothing was changed") ||
		!strings.Contains(out, "[planned]     table candles: create table") ||
		!strings.Contains(out, "[planned]     table readings: create table") ||
		strings.Contains(out, "[done]") {
		t.Fatalf("dry run (exit %d):\n%s%s", code, out, errOut)
	}
	if strings.Count(out, "table candles: create table") != 1 || !strings.Contains(out, "sink again, history (") {
		t.Errorf("a table two sinks share is provisioned once:\n%s", out)
	}
	out, errOut, code = runKandle(t, "tables", "apply", "-t", top, "--dry-run")
	if code != 0 || !strings.Contains(out, "[planned]     table candles: create table") {
		t.Fatalf("a dry run created the table: second dry run (exit %d):\n%s%s", code, out, errOut)
	}

	out, errOut, code = runKandle(t, "tables", "apply", "-t", top)
	if code != 0 || !strings.Contains(out, "[done]        table candles: create table") ||
		!strings.Contains(out, "[done]        table readings: create table") ||
		!strings.Contains(out, "by_timeframe") || !strings.Contains(out, "by_close") {
		t.Fatalf("apply (exit %d):\n%s%s", code, out, errOut)
	}
	out, errOut, code = runKandle(t, "tables", "apply", "-t", top)
	if code != 0 || strings.Contains(out, "[done]") || strings.Contains(out, "[planned]") ||
		strings.Contains(out, "create table") || !strings.Contains(out, "table readings: up to date") ||
		!strings.Contains(out, "[unsupported] table candles: enable TTL") {
		// dynalite has no UpdateTimeToLive, so the TTL step stays "unsupported" on every run.
		t.Fatalf("second apply must change nothing (exit %d):\n%s%s", code, out, errOut)
	}
	out, errOut, code = runKandle(t, "tables", "apply", "-t", top, "-sink", "readings", "--dry-run")
	if code != 0 || strings.Contains(out, "candles") || !strings.Contains(out, "table readings: up to date") {
		t.Fatalf("-sink readings (exit %d):\n%s%s", code, out, errOut)
	}
	if _, errOut, code = runKandle(t, "tables", "apply", "-t", top, "-sink", "nope"); code != 1 || !strings.Contains(errOut, `no sink "nope"`) {
		t.Errorf("unknown -sink: exit %d, %s", code, errOut)
	}
	if out, _, code = runKandle(t, "tables", "apply", "-h"); code != 0 {
		t.Errorf("tables apply -h: exit %d", code)
	} else if _, errOut, _ = runKandle(t, "help", "tables"); !strings.Contains(errOut, "-dry-run") || !strings.Contains(errOut, "-sink") {
		t.Errorf("help tables documents no flags:\n%s", errOut)
	}

	// Write through the sinks themselves, then read back with kandle query.
	tp, err := topology.Load(top, sinkRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	hist, err := dynamodb.New(ctx, *tp.Sinks["history"].Config.(*dynamodb.Config))
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC).UnixMilli()
	var cs []candle.Candle
	for i, sym := range []string{"BTC", "ETH", "BTC", "BTC", "ETH"} {
		o := base + int64(i)*60_000
		p := decimal.MustParse(fmt.Sprintf("%d.25", 100+i))
		cs = append(cs, candle.Candle{Symbol: sym, Timeframe: "1m", OpenTime: o, CloseTime: o + 60_000,
			Open: p, High: p, Low: p, Close: p, Volume: decimal.MustParseSum("0.1"), QuoteVolume: decimal.MustParseSum("10.025"), Trades: 1})
	}
	if err := hist.Write(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if err := hist.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	jsonOf := func(cs ...candle.Candle) string {
		var b []byte
		for i := range cs {
			b = append(cs[i].AppendJSON(b), '\n')
		}
		return string(b)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"latest", "BTC", "1m"}, jsonOf(cs[3])},
		{[]string{"latest", "SOL", "1m"}, ""},
		{[]string{"range", "BTC", "1m", "-from", "2026-01-05T10:00:00Z", "-to", fmt.Sprint(base + 3*60_000)}, jsonOf(cs[0], cs[2])},
		{[]string{"range", "ETH", "1m", "-from", fmt.Sprint(base), "-to", "2026-01-05T11:00:00Z"}, jsonOf(cs[1], cs[4])},
		{[]string{"many", "ETH,SOL,BTC", "1m"}, jsonOf(cs[4], cs[3])},
	} {
		args := append([]string{"query", "-t", top, "-sink", "history", "-json"}, c.args...)
		out, errOut, code := runKandle(t, args...)
		if code != 0 || out != c.want {
			t.Errorf("kandle %s (exit %d):\n%s%s\nwant:\n%s", strings.Join(args[3:], " "), code, out, errOut, c.want)
		}
	}
	out, errOut, code = runKandle(t, "query", "-t", top, "-sink", "history", "latest", "BTC", "1m")
	if code != 0 || !strings.Contains(out, "SYMBOL  TF  OPEN_TIME") ||
		!strings.Contains(out, "BTC     1m  2026-01-05T10:03:00.000Z  103.25  103.25  103.25  103.25  0.1     10.025        1       false") {
		t.Errorf("table output (exit %d):\n%s%s", code, out, errOut)
	}

	// Device readings, write-sharded over 4 partitions, merge back in time order.
	rd, err := dynamodb.New(ctx, *tp.Sinks["readings"].Config.(*dynamodb.Config))
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	var ts []candle.Trade
	for i := 0; i < 20; i++ {
		tr := candle.Trade{Key: "dev-7", TS: base + int64(i)*1000, Price: decimal.MustParse(fmt.Sprintf("21.%d", i)), Qty: decimal.MustParse("1")}
		ts = append(ts, tr)
		if i >= 5 && i < 15 {
			fmt.Fprintf(&want, `{"key":"dev-7","ts":%d,"price":"%s","qty":"1","trade_id":""}`+"\n", tr.TS, tr.Price)
		}
	}
	ts = append(ts, candle.Trade{Key: "dev-8", TS: base + 7000, Price: decimal.MustParse("1"), Qty: decimal.MustParse("1")})
	if err := rd.WriteTrades(ctx, ts); err != nil {
		t.Fatal(err)
	}
	if err := rd.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runKandle(t, "query", "-t", top, "-sink", "readings", "-json", "readings", "dev-7",
		"-from", fmt.Sprint(base+5000), "-to", fmt.Sprint(base+15000))
	if code != 0 || out != want.String() {
		t.Errorf("readings (exit %d):\n%s%s\nwant:\n%s", code, out, errOut, want.String())
	}

	// Mistakes explain themselves; an unreachable endpoint ends at -timeout.
	dead := writeFile(t, "dead.yaml", fmt.Sprintf(tablesTopology, fmt.Sprintf("http://127.0.0.1:%d", testkit.FreePort(t))))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"query", "-t", top, "latest", "BTC", "1m"}, "pick the sink to read with -sink"},
		{[]string{"query", "-t", top, "-sink", "history", "range", "BTC", "1m"}, "range needs -from"},
		{[]string{"query", "-t", top, "-sink", "history", "range", "BTC", "1m", "-from", "yesterday"}, "neither RFC 3339"},
		{[]string{"query", "-t", top, "-sink", "history", "latest", "BTC"}, "usage: kandle query latest SYMBOL TIMEFRAME"},
		{[]string{"query", "-t", top, "-sink", "history", "oldest"}, `unknown action "oldest"`},
		{[]string{"tables", "create"}, "kandle tables apply"},
		{[]string{"query", "-t", top, "-sink", "history", "trades", "BTC", "-from", "0"}, "trades reads pks made of {symbol}, {yyyy}"},
		{[]string{"query", "-t", top, "-sink", "readings", "trades", "dev-7", "-from", "0"}, "has {shard}"},
		{[]string{"query", "-t", dead, "-sink", "history", "-timeout", "500ms", "latest", "BTC", "1m"}, "no answer within -timeout 500ms"},
	} {
		if _, errOut, code := runKandle(t, c.args...); code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("kandle %s: exit %d, stderr:\n%s\nwant it to say %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
}

// docs/reference.md is exactly what `kandle docs` prints with the full sink
// registry, and the example sink topology validates against that registry.
func TestReferenceAndSinkTopology(t *testing.T) {
	root := testkit.RepoRoot(t)
	want, err := os.ReadFile(filepath.Join(root, "docs", "reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	if got := topology.ReferenceMarkdown(sinkRegistry()); got != string(want) {
		t.Errorf("docs/reference.md is stale: run `go run ./cmd/kandle docs > docs/reference.md`")
	}
	out, errOut, code := runKandle(t, "validate", filepath.Join(root, "testdata", "topologies", "crypto-sinks.yaml"))
	if code != 0 || !strings.Contains(out, "ok (1 sources, 4 processors, 4 sinks)") {
		t.Errorf("kandle validate crypto-sinks.yaml: exit %d\n%s%s", code, out, errOut)
	}
}
