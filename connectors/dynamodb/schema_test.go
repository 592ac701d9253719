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

// TestTradeLedgerSchema: PK {symbol}#{yyyy}-{mm}-{dd}-{hh}, SK {ts}#{trade_id}
// (S), TTL 24h after the trade's event time, fed by WriteTrades and
// redelivered once.
func TestTradeLedgerSchema(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	cfg := Config{
		Table:     TableSpec{Name: "ledger", PKAttribute: "pk", SKAttribute: "sk", SKType: "S", TTLAttribute: "expires_at"},
		Provision: true,
		Endpoint:  dyn.URL(),
		PK:        "{symbol}#{yyyy}-{mm}-{dd}-{hh}",
		SK:        "{ts}#{trade_id}",
		TTL:       Duration(24 * time.Hour),
	}
	h := newSink(t, cfg, nil)
	base := time.Date(2026, 11, 23, 13, 58, 0, 0, time.UTC).UnixMilli()
	var trades []candle.Trade
	for i := 0; i < 80; i++ { // 13:58:00 .. 14:01:57, two hour partitions
		trades = append(trades, candle.Trade{Key: "BTC", TS: base + int64(i)*3000 + 1, Price: dec(fmt.Sprintf("9%d.25", i)),
			Qty: dec("0.1"), ID: strconv.Itoa(1000 + i), Side: candle.Side(i % 3)}) // no side, buy, sell
	}
	trades = append(trades, candle.Trade{Key: "BTC", TS: base + 1, Price: dec("1"), Qty: dec("2"), ID: "same-ms"}) // same ms, other id
	for round := 0; round < 2; round++ {
		if err := h.sink.WriteTrades(ctx, trades); err != nil {
			t.Fatal(err)
		}
		if err := h.sink.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	huge := candle.Trade{Key: "BTC", TS: base, Price: dec("1"), Qty: dec("1"), ID: strings.Repeat("z", 2000)}
	var rej *RejectedError
	if err := h.sink.WriteTrades(ctx, []candle.Trade{huge}); !errors.As(err, &rej) || len(rej.Trades()) != 1 ||
		!errors.Is(rej.TradeErrs[0].Err, ErrItemTooLarge) {
		t.Fatalf("WriteTrades with a 2000-byte sort key = %v, want a RejectedError", err)
	}
	if err := h.sink.Write(ctx, genCandles([]string{"BTC"}, []string{"1m"}, 1, 1)); err == nil ||
		!strings.Contains(err.Error(), "{trade_id}") {
		t.Fatalf("Write of candles to a {trade_id}-keyed ledger = %v, want an error naming {trade_id}", err)
	}
	got := map[string]map[string]types.AttributeValue{}
	for _, pk := range []string{"BTC#2026-11-23-13", "BTC#2026-11-23-14"} {
		items := partitionItems(t, h.raw, "ledger", "pk", pk)
		if len(items) == 0 {
			t.Fatalf("partition %s is empty", pk)
		}
		for _, it := range items {
			got[attrString(it["sk"])] = it
		}
	}
	if len(got) != len(trades) {
		t.Fatalf("%d items, want %d", len(got), len(trades))
	}
	for _, tr := range trades {
		sk := fmt.Sprintf("%d#%s", tr.TS, tr.ID)
		it, ok := got[sk]
		if !ok {
			t.Fatalf("missing item %s", sk)
		}
		back, err := itemTrade(it)
		if err != nil || back != tr {
			t.Fatalf("item %s = %+v (%v), want %+v", sk, back, err, tr)
		}
		wantTTL := strconv.FormatInt((tr.TS+86_400_000+999)/1000, 10)
		if ttl := it["expires_at"].(*types.AttributeValueMemberN).Value; ttl != wantTTL {
			t.Fatalf("item %s: expires_at %s, want %s", sk, ttl, wantTTL)
		}
	}
}

// TestDeviceReadingsSharded: PK {symbol}#shard{shard} over 4 shards, SK
// {ts} (N), TTL 30d; ReadSharded merges the shards back in time order.
func TestDeviceReadingsSharded(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	cfg := Config{
		Table:     TableSpec{Name: "readings", PKAttribute: "device", SKAttribute: "ts_ms", SKType: "N", TTLAttribute: "ttl"},
		Provision: true,
		Endpoint:  dyn.URL(),
		PK:        "{symbol}#shard{shard}",
		SK:        "{ts}",
		Shards:    4,
		TTL:       mustDuration(t, "30d"),
	}
	h := newSink(t, cfg, nil)
	base := int64(1_763_900_000_000)
	var want []candle.Trade
	for i := 0; i < 120; i++ {
		want = append(want, candle.Trade{Key: "sensor-1", TS: base + int64(i)*1000, Price: dec(fmt.Sprintf("21.%d", i)), Qty: dec("1")})
	}
	other := candle.Trade{Key: "sensor-2", TS: base, Price: dec("5"), Qty: dec("1")}
	if err := h.sink.WriteTrades(ctx, append(append([]candle.Trade{}, want...), other)); err != nil {
		t.Fatal(err)
	}
	if err := h.sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	total := 0
	for s := 0; s < 4; s++ {
		items := partitionItems(t, h.raw, "readings", "device", fmt.Sprintf("sensor-1#shard%02d", s))
		if len(items) == 0 {
			t.Fatalf("shard %d got nothing: sharding does not spread", s)
		}
		for _, it := range items {
			ts, _ := strconv.ParseInt(attrString(it["ts_ms"]), 10, 64)
			wantTTL := strconv.FormatInt((ts+30*86_400_000+999)/1000, 10)
			if ttl := attrString(it["ttl"]); ttl != wantTTL {
				t.Fatalf("ttl %s, want %s", ttl, wantTTL)
			}
		}
		total += len(items)
	}
	if total != len(want) {
		t.Fatalf("%d items over the shards, want %d", total, len(want))
	}
	got, err := h.sink.Reader().ReadSharded(ctx, "sensor-1", base+10_000, base+50_000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 40 {
		t.Fatalf("ReadSharded returned %d readings, want 40", len(got))
	}
	for i, tr := range got {
		if tr != want[10+i] {
			t.Fatalf("reading %d = %+v, want %+v", i, tr, want[10+i])
		}
	}
	if _, err := h.sink.Reader().ReadSharded(ctx, "sensor-2", base, base+1); err != nil {
		t.Fatal(err)
	}
	if err := h.sink.Write(ctx, genCandles([]string{"x"}, []string{"1m"}, 1, 1)); err != nil {
		t.Fatalf("Write on a device table: %v", err)
	}
}

func mustDuration(t testing.TB, s string) Duration {
	t.Helper()
	d, err := ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestTTLByTimeframe: per-timeframe TTLs override ttl.
func TestTTLByTimeframe(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	cfg := historyConfig("ttls", dyn.URL())
	cfg.Table.TTLAttribute = "expires_at"
	cfg.TTL = mustDuration(t, "2d")
	cfg.TTLByTimeframe = map[string]Duration{"1m": mustDuration(t, "7d")}
	h := newSink(t, cfg, nil)
	cs := genCandles([]string{"BTC"}, []string{"1m", "5m"}, 1, 1)
	if err := h.sink.Write(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if err := h.sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		days := int64(2)
		if c.Timeframe == "1m" {
			days = 7
		}
		items := partitionItems(t, h.raw, "ttls", "pk", "BTC#"+c.Timeframe)
		want := strconv.FormatInt((c.CloseTime+days*86_400_000+999)/1000, 10)
		if len(items) != 1 || attrString(items[0]["expires_at"]) != want {
			t.Fatalf("%s: items %v, want expires_at %s", c.Timeframe, items, want)
		}
	}
}
