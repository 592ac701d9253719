package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/internal/testkit"
)

// TestCandleHistoryRedelivery writes a candle stream in poll-sized batches,
// then the whole stream again (a redelivery after a crash), and reads the
// table back: exactly one item per (symbol, timeframe, open_time), with the
// candles' exact values.
func TestCandleHistoryRedelivery(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	h := newSink(t, historyConfig("candles", dyn.URL()), nil)
	symbols, tfs := []string{"BTC-USD", "ETH-USD", "SOL-USD"}, []string{"1m", "5m"}
	want := genCandles(symbols, tfs, 40, 1)
	for round := 0; round < 2; round++ {
		for i := 0; i < len(want); i += 37 { // poll batches
			if err := h.sink.Write(ctx, want[i:min(i+37, len(want))]); err != nil {
				t.Fatalf("round %d: Write: %v", round, err)
			}
		}
		if err := h.sink.Flush(ctx); err != nil {
			t.Fatalf("round %d: Flush: %v", round, err)
		}
	}
	byPK := map[string][]candle.Candle{}
	for _, c := range want {
		byPK[c.Symbol+"#"+c.Timeframe] = append(byPK[c.Symbol+"#"+c.Timeframe], c)
	}
	for pk, cs := range byPK {
		items := partitionItems(t, h.raw, "candles", "pk", pk)
		if len(items) != len(cs) {
			t.Fatalf("%s: %d items, want %d", pk, len(items), len(cs))
		}
		for i, it := range items {
			got, err := itemCandle(it)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(&cs[i]) {
				t.Fatalf("%s item %d:\n got %+v\nwant %+v", pk, i, got, cs[i])
			}
			if sk := it["sk"].(*types.AttributeValueMemberN).Value; sk != strconv.FormatInt(cs[i].OpenTime, 10) {
				t.Fatalf("%s item %d: sk %s, want open_time %d", pk, i, sk, cs[i].OpenTime)
			}
			if o := it["o"].(*types.AttributeValueMemberS).Value; o != cs[i].Open.String() {
				t.Fatalf("o stored as %q, want the exact decimal string %q", o, cs[i].Open.String())
			}
		}
	}
	if got := metric(t, h.reg, "kandle_dynamodb_items_written_total", "table", "candles"); got != float64(2*len(want)) {
		t.Fatalf("items written metric %v, want %d", got, 2*len(want))
	}
	if got := metric(t, h.reg, "kandle_dynamodb_buffered_items"); got != 0 {
		t.Fatalf("buffered gauge %v after Flush", got)
	}
}

// TestBatchesDedupeAndLastWriteWins buffers 90 writes of 40 keys and
// checks each key is written once (a candle by one conditional PutItem),
// with the stored values the last written.
func TestBatchesDedupeAndLastWriteWins(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	cfg := historyConfig("dups", dyn.URL())
	cfg.BufferItems = 1000
	var f *faultAPI
	h := newSink(t, cfg, func(a API) API { f = newFaultAPI(a); return f })
	v1 := genCandles([]string{"BTC"}, []string{"1m"}, 40, 1)
	v2 := genCandles([]string{"BTC"}, []string{"1m"}, 40, 2)
	v3 := genCandles([]string{"BTC"}, []string{"1m"}, 10, 3)
	for _, batch := range [][]candle.Candle{v1[:20], v2, v1[20:], v3} {
		if err := h.sink.Write(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	if f.Calls("BatchWriteItem")+f.Calls("PutItem") != 0 {
		t.Fatalf("Write sent before the buffer was full")
	}
	if err := h.sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.Calls("PutItem"); n != 40 || f.Calls("BatchWriteItem") != 0 {
		t.Fatalf("%d PutItem and %d BatchWriteItem calls for 40 distinct candle keys, want 40 and 0", n, f.Calls("BatchWriteItem"))
	}
	seen := map[string]bool{}
	for _, it := range f.puts {
		k := h.sink.itemKey(it)
		if seen[k] {
			t.Fatalf("key %q written twice in one flush", k)
		}
		seen[k] = true
	}
	// Last write wins: keys 0-9 from v3, 10-19 from v2 (v1[:20] came first),
	// 20-39 from v1 (written after v2).
	want := append(append(append([]candle.Candle{}, v3...), v2[10:20]...), v1[20:]...)
	items := partitionItems(t, h.raw, "dups", "pk", "BTC#1m")
	if len(items) != 40 {
		t.Fatalf("%d items, want 40", len(items))
	}
	for i, it := range items {
		got, _ := itemCandle(it)
		if got != want[i] {
			t.Fatalf("item %d: open %s, want %s", i, got.Open, want[i].Open)
		}
	}
}

// TestTradeBatchesDedupe buffers trades (written by BatchWriteItem) with
// repeated keys: every batch has at most 25 distinct keys, the last write
// of a key wins.
func TestTradeBatchesDedupe(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	cfg := tradeConfig("tdups", dyn.URL())
	cfg.BufferItems = 1000
	var f *faultAPI
	h := newSink(t, cfg, func(a API) API { f = newFaultAPI(a); return f })
	v1, v2 := genTrades("BTC", 40, 1), genTrades("BTC", 40, 2)
	for _, batch := range [][]candle.Trade{v1[:20], v2, v1[20:]} {
		if err := h.sink.WriteTrades(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(f.batches); n != 2 || f.Calls("PutItem") != 0 {
		t.Fatalf("%d BatchWriteItem calls and %d PutItem for 40 distinct trade keys, want 2 and 0", n, f.Calls("PutItem"))
	}
	for i, b := range f.batches {
		seen := map[string]bool{}
		for _, it := range b {
			k := h.sink.itemKey(it)
			if seen[k] {
				t.Fatalf("batch %d names key %q twice", i, k)
			}
			seen[k] = true
		}
		if len(b) > 25 {
			t.Fatalf("batch %d has %d items", i, len(b))
		}
	}
	want := append(append([]candle.Trade{}, v2[:20]...), v1[20:]...)
	items := partitionItems(t, h.raw, "tdups", "pk", "BTC")
	if len(items) != 40 {
		t.Fatalf("%d items, want 40", len(items))
	}
	for i, it := range items {
		if got, err := itemTrade(it); err != nil || got != want[i] {
			t.Fatalf("item %d: %+v (%v), want %+v", i, got, err, want[i])
		}
	}
}

// TestRetriesThrottlingAndUnprocessed injects throttling errors into
// candle PutItems and partial trade batches; every item still lands
// exactly once.
func TestRetriesThrottlingAndUnprocessed(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	cfg := historyConfig("retries", dyn.URL())
	cfg.MaxInFlight = 2
	var f *faultAPI
	h := newSink(t, cfg, func(a API) API {
		f = newFaultAPI(a)
		f.throttle = 5
		return f
	})
	want := genCandles([]string{"BTC", "ETH"}, []string{"1m"}, 60, 1)
	if err := h.sink.Write(ctx, want); err != nil {
		t.Fatal(err)
	}
	if err := h.sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, sym := range []string{"BTC", "ETH"} {
		if n := len(partitionItems(t, h.raw, "retries", "pk", sym+"#1m")); n != 60 {
			t.Fatalf("%s: %d items, want 60", sym, n)
		}
	}
	if got := metric(t, h.reg, "kandle_dynamodb_retries_total", "reason", "throttled"); got != 5 {
		t.Fatalf("throttled retries %v, want 5", got)
	}
	if got := metric(t, h.reg, "kandle_dynamodb_items_written_total"); got != 120 {
		t.Fatalf("items written %v, want 120", got)
	}
	if f.maxFlight > 2*25 || f.maxFlight < 1 {
		t.Fatalf("%d PutItem calls in flight at once, max_in_flight 2 allows 2 batches' worth (50)", f.maxFlight)
	}

	tcfg := tradeConfig("tretries", dyn.URL())
	tcfg.MaxInFlight = 2
	var tf *faultAPI
	th := newSink(t, tcfg, func(a API) API {
		tf = newFaultAPI(a)
		tf.throttle, tf.partial = 5, 6
		return tf
	})
	trades := genTrades("BTC", 120, 1)
	if err := th.sink.WriteTrades(ctx, trades); err != nil {
		t.Fatal(err)
	}
	if err := th.sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(partitionItems(t, th.raw, "tretries", "pk", "BTC")); n != 120 {
		t.Fatalf("trades: %d items, want 120", n)
	}
	if got := metric(t, th.reg, "kandle_dynamodb_retries_total", "reason", "throttled"); got != 5 {
		t.Fatalf("trades: throttled retries %v, want 5", got)
	}
	if got := metric(t, th.reg, "kandle_dynamodb_retries_total", "reason", "unprocessed"); got < 6 {
		t.Fatalf("trades: unprocessed retries %v, want >= 6", got)
	}
	if got := metric(t, th.reg, "kandle_dynamodb_items_written_total"); got != 120 {
		t.Fatalf("trades: items written %v, want 120", got)
	}
	if tf.maxFlight > 2 || tf.maxFlight < 1 {
		t.Fatalf("%d BatchWriteItem calls in flight at once, max_in_flight is 2", tf.maxFlight)
	}
}

// TestWriteWaitsForEndpoint starts the sink against a port nothing listens
// on, starts dynalite there once the sink has failed and retried for a
// second, and expects the pending Flush to provision the table and succeed.
func TestWriteWaitsForEndpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	port := testkit.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := historyConfig("late", "http://"+addr)
	cfg.RetryMax = Duration(200 * time.Millisecond)
	h := newSink(t, cfg, nil)
	want := genCandles([]string{"BTC"}, []string{"1m"}, 30, 1)
	done := make(chan error, 1)
	go func() {
		if err := h.sink.Write(ctx, want); err != nil {
			done <- err
			return
		}
		done <- h.sink.Flush(ctx)
	}()
	start := time.Now()
	for metric(t, h.reg, "kandle_dynamodb_retries_total", "reason", "transient") < 3 || time.Since(start) < time.Second {
		select {
		case err := <-done:
			t.Fatalf("Flush returned %v while the endpoint was down", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	bin := testkit.EmuDir(t) + "/node_modules/.bin/dynalite"
	testkit.Start(t, "dynalite", addr, func() error { return nil }, "node",
		[]string{bin, "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--createTableMs", "20"})
	if err := <-done; err != nil {
		t.Fatalf("Flush after the endpoint came up: %v", err)
	}
	if n := len(partitionItems(t, h.raw, "late", "pk", "BTC#1m")); n != 30 {
		t.Fatalf("%d items, want 30", n)
	}
}

// TestTooLargeRejected: items over 400 KB (or keys over their limits) come
// back as a *RejectedError naming the candles; the others are written.
func TestTooLargeRejected(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	cfg := historyConfig("big", dyn.URL())
	cfg.PK = "{timeframe}" // keep the huge symbol out of the key
	h := newSink(t, cfg, nil)
	cs := genCandles([]string{"OK"}, []string{"1m"}, 3, 1)
	huge := cs[1]
	huge.Symbol = strings.Repeat("X", 410*1024)
	err := h.sink.Write(ctx, []candle.Candle{cs[0], huge, cs[2]})
	var rej *RejectedError
	if !errors.As(err, &rej) || len(rej.CandleErrs) != 1 || rej.CandleErrs[0].Candle.OpenTime != huge.OpenTime ||
		!errors.Is(rej.CandleErrs[0].Err, ErrItemTooLarge) {
		t.Fatalf("Write = %v, want a RejectedError for the huge candle", err)
	}
	// The engine finds rejections through an interface (it must not import
	// this package), also inside joined errors.
	var engineView interface {
		error
		Candles() []candle.Candle
	}
	if !errors.As(errors.Join(errors.New("other"), err), &engineView) || len(engineView.Candles()) != 1 ||
		engineView.Candles()[0].Symbol != huge.Symbol {
		t.Fatalf("RejectedError does not satisfy the engine's RejectedCandles view")
	}
	if err := h.sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(partitionItems(t, h.raw, "big", "pk", "1m")); n != 2 {
		t.Fatalf("%d items, want the 2 normal candles", n)
	}

	// A partition key over 2048 bytes.
	cfg2 := historyConfig("big", dyn.URL())
	h2 := newSink(t, cfg2, nil)
	long := cs[0]
	long.Symbol = strings.Repeat("Y", 3000)
	if err := h2.sink.Write(ctx, []candle.Candle{long}); !errors.As(err, &rej) || len(rej.CandleErrs) != 1 {
		t.Fatalf("Write with a 3000-byte pk = %v, want a RejectedError", err)
	}
	// A key that renders empty (no symbol) can never be written either.
	empty := cs[0]
	empty.Symbol = ""
	h2.sink.pk, _ = parseTemplate("{symbol}")
	if err := h2.sink.Write(ctx, []candle.Candle{empty}); !errors.As(err, &rej) || len(rej.CandleErrs) != 1 {
		t.Fatalf("Write with an empty pk = %v, want a RejectedError", err)
	}
	if got := metric(t, h2.reg, "kandle_dynamodb_errors_total", "kind", "rejected"); got != 2 {
		t.Fatalf("rejected metric %v, want 2", got)
	}
}

// TestValidationErrorIsolatesItem: when DynamoDB refuses a batch with a
// ValidationException, the sink resends item by item and rejects only the
// culprit.
func TestValidationErrorIsolatesItem(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	cs := genCandles([]string{"BTC"}, []string{"1m"}, 20, 1)
	bad := strconv.FormatInt(cs[7].OpenTime, 10)
	h := newSink(t, historyConfig("valid", dyn.URL()), func(a API) API {
		f := newFaultAPI(a)
		f.validate = func(it map[string]types.AttributeValue) bool { return attrString(it["sk"]) != bad }
		return f
	})
	if err := h.sink.Write(ctx, cs); err != nil {
		t.Fatal(err)
	}
	err := h.sink.Flush(ctx)
	var rej *RejectedError
	if !errors.As(err, &rej) || len(rej.CandleErrs) != 1 || rej.CandleErrs[0].Candle != cs[7] {
		t.Fatalf("Flush = %v, want a RejectedError for candle 7", err)
	}
	if n := len(partitionItems(t, h.raw, "valid", "pk", "BTC#1m")); n != 19 {
		t.Fatalf("%d items, want 19", n)
	}
	if err := h.sink.Flush(ctx); err != nil {
		t.Fatalf("second Flush: %v (the rejected item must not stay buffered)", err)
	}
}

// TestCloseFlushes: Close writes what is buffered and refuses later writes.
func TestCloseFlushes(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	h := newSink(t, historyConfig("closing", dyn.URL()), nil)
	cs := genCandles([]string{"BTC"}, []string{"1m"}, 5, 1)
	if err := h.sink.Write(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if err := h.sink.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(partitionItems(t, h.raw, "closing", "pk", "BTC#1m")); n != 5 {
		t.Fatalf("%d items after Close, want 5", n)
	}
	if err := h.sink.Write(ctx, cs); err == nil {
		t.Fatal("Write after Close succeeded")
	}
}

// TestFlushCancelled: with the endpoint down, Flush returns when ctx ends
// and keeps the items buffered for the next attempt.
func TestFlushCancelled(t *testing.T) {
	cfg := historyConfig("gone", fmt.Sprintf("http://127.0.0.1:%d", testkit.FreePort(t)))
	cfg.Provision = false
	h := newSink(t, cfg, nil)
	if err := h.sink.Write(context.Background(), genCandles([]string{"BTC"}, []string{"1m"}, 3, 1)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := h.sink.Flush(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush = %v, want a deadline error", err)
	}
	if got := metric(t, h.reg, "kandle_dynamodb_buffered_items"); got != 3 {
		t.Fatalf("buffered %v after a failed Flush, want 3", got)
	}
}
