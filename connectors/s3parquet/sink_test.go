package s3parquet

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/parquet-go/parquet-go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// The engine's CandleSink interface, restated (connectors do not import
// the engine).
var _ interface {
	Write(context.Context, []candle.Candle) error
	Flush(context.Context) error
	Close(context.Context) error
} = (*Sink)(nil)

var symbols = []string{"BTC/USDT", "ETH-USD", "sol usdt+perp"}

// writeBatches writes cs in batches of n, as poll batches would arrive.
func writeBatches(t testing.TB, s *Sink, cs []candle.Candle, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < len(cs); i += n {
		if err := s.Write(ctx, cs[i:min(i+n, len(cs))]); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
}

// TestUpsertAndRedelivery: candles of several symbols, timeframes and days,
// part of them delivered again after they were flushed, end up in exactly
// the expected objects, each candle once and exact.
func TestUpsertAndRedelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFakeS3(t, "lake")
	reg := prometheus.NewRegistry()
	cfg := f.config("lake/candles")
	cfg.FlushRows = 700
	s, err := New(ctx, cfg, WithLogger(quietLogger()), WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	cs := gen(symbols...)
	writeBatches(t, s, cs, 250)
	// Redeliver a stretch across the first midnight, as after a crash.
	writeBatches(t, s, cs[len(cs)/4:len(cs)/2], 100)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	objects := listObjects(t, f.client(), "lake")
	want := expectedObjects("candles", cs)
	if len(want) != 3*(3+3+3) {
		t.Fatalf("test data spans %d partitions, want 27", len(want))
	}
	if _, ok := objects["candles/timeframe=1m/symbol=BTC%2FUSDT/year=2026/month=11/day=22/candles.parquet"]; !ok {
		t.Errorf("no object at the documented BTC/USDT path; have %v", keys(objects))
	}
	checkObjects(t, objects, want)
	if got := counter(t, reg, "kandle_s3parquet_candles_written_total"); got < float64(len(cs)) {
		t.Errorf("candles_written_total = %v, want ≥ %d", got, len(cs))
	}
	if err := s.Write(ctx, cs[:1]); err == nil {
		t.Error("Write after Close succeeded")
	}
}

func keys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestReplayDeterminism: two sinks given the same candles with different
// batch sizes, flush thresholds, order and redeliveries write byte-identical
// objects.
func TestReplayDeterminism(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFakeS3(t, "replay-a", "replay-b")
	cs := gen(symbols...)

	cfgA := f.config("replay-a")
	cfgA.FlushRows = 97
	a, err := New(ctx, cfgA, WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	writeBatches(t, a, cs, 13)
	writeBatches(t, a, cs[100:900], 61)
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	b, err := New(ctx, f.config("replay-b"), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	shuffled := append([]candle.Candle(nil), cs...)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	writeBatches(t, b, shuffled, len(shuffled))
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	oa, ob := listObjects(t, f.client(), "replay-a"), listObjects(t, f.client(), "replay-b")
	if len(oa) != len(ob) || len(oa) == 0 {
		t.Fatalf("a has %d objects, b %d", len(oa), len(ob))
	}
	for k, da := range oa {
		if !bytes.Equal(da, ob[k]) {
			t.Errorf("%s differs: %d vs %d bytes", k, len(da), len(ob[k]))
		}
	}
	checkObjects(t, oa, expectedObjects("", cs))
}

// TestLastWriteWins: a corrected candle replaces the stored one on the next
// flush (read, merge by open_time, rewrite), other rows untouched.
func TestLastWriteWins(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	s, err := New(ctx, Config{URL: "file://" + dir}, WithLogger(quietLogger()), WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	cs := gen("BTC/USDT")[:50]
	writeBatches(t, s, cs, 50)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// A pure redelivery reads the object back, finds nothing new and
	// writes nothing.
	objects := counter(t, reg, "kandle_s3parquet_objects_written_total")
	writeBatches(t, s, cs[5:20], 50)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, reg, "kandle_s3parquet_objects_written_total"); got != objects {
		t.Errorf("a redelivery rewrote %v objects", got-objects)
	}
	fixed := cs[10]
	fixed.Close = decimal.MustParse("1.000000000000000001")
	fixed.Trades = 12345
	if err := s.Write(ctx, []candle.Candle{fixed}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := append([]candle.Candle(nil), cs...)
	want[10] = fixed
	checkObjects(t, readDir(t, dir), expectedObjects("", want))
}

// TestFileLake: file:// mode writes the same layout atomically: only the
// expected files, no temp files left behind, exact contents.
func TestFileLake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "lake")
	s, err := New(ctx, Config{URL: "file://" + dir, FlushRows: 500}, WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	cs := gen(symbols...)
	writeBatches(t, s, cs, 300)
	writeBatches(t, s, cs[:400], 300)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	files := readDir(t, dir)
	checkObjects(t, files, expectedObjects("", cs))
	if _, err := os.Stat(filepath.Join(dir, "timeframe=1d", "symbol=sol%20usdt%2Bperp", "year=2026", "month=11", "day=21", "candles.parquet")); err != nil {
		t.Errorf("escaped symbol path: %v", err)
	}
}

// readDir returns every file under dir by slash path relative to dir.
func readDir(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == LockName {
			return nil // the writers' lock file, not an object
		}
		b, err := os.ReadFile(p)
		out[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFlushPolicy: rows, age (injected clock) and a completed day each
// trigger a flush; below every threshold nothing is written.
func TestFlushPolicy(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	reg := prometheus.NewRegistry()
	dir := t.TempDir()
	s, err := New(ctx, Config{URL: "file://" + dir, FlushRows: 100, FlushAge: time.Minute},
		WithClock(clock), WithRegisterer(reg), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	objects := func() float64 { return counter(t, reg, "kandle_s3parquet_objects_written_total") }
	var m1 []candle.Candle // 1m candles of one symbol, crossing midnight at index 120
	for _, c := range gen("X") {
		if c.Timeframe == "1m" {
			m1 = append(m1, c)
		}
	}

	// Below the thresholds: buffered only.
	if err := s.Write(ctx, m1[:50]); err != nil {
		t.Fatal(err)
	}
	if objects() != 0 || len(readDir(t, dir)) != 0 {
		t.Fatal("flushed below every threshold")
	}
	// Age: the clock passes flush_age, the next write flushes.
	clock.Add(61 * time.Second)
	if err := s.Write(ctx, m1[50:51]); err != nil {
		t.Fatal(err)
	}
	if objects() != 1 {
		t.Fatalf("objects after flush_age = %v, want 1", objects())
	}
	// Completed day: the first candle of the next day flushes the old day
	// (one object) and keeps the new one buffered.
	if err := s.Write(ctx, m1[51:121]); err != nil {
		t.Fatal(err)
	}
	if objects() != 2 {
		t.Fatalf("objects after a day completed = %v, want 2", objects())
	}
	if s.Buffered() != 1 {
		t.Fatalf("buffered rows = %d, want 1 (the new day's candle)", s.Buffered())
	}
	// Rows: reaching flush_rows flushes.
	if err := s.Write(ctx, m1[121:220]); err != nil {
		t.Fatal(err)
	}
	if objects() != 3 || s.Buffered() != 0 {
		t.Fatalf("after flush_rows: objects %v, buffered %d; want 3, 0", objects(), s.Buffered())
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkObjects(t, readDir(t, dir), expectedObjects("", m1[:220]))
}

// TestRejected: candles that can never be stored come back in a
// *RejectedError; the good candles of the same call are stored.
func TestRejected(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	s, err := New(ctx, Config{URL: "file://" + dir}, WithLogger(quietLogger()), WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	good := gen("OK")[:3]
	huge := good[0]
	huge.Symbol, huge.High = "HUGE", decimal.MustParse("100000000000000000000")
	edge := good[1]
	edge.Symbol, edge.High = "EDGE", decimal.MustParse("99999999999999999999.999999999999999999")
	edge.QuoteVolume = decimal.MustParseSum("57896044618658097711551615169109354219337.741413091334446874") // text: any size
	noSym := good[0]
	noSym.Symbol = ""
	badTF := good[0]
	badTF.Timeframe = "7x"
	badWin := good[0]
	badWin.CloseTime = badWin.OpenTime
	in := append([]candle.Candle{huge, noSym}, good...)
	in = append(in, badTF, badWin, edge)
	err = s.Write(ctx, in)
	rej, ok := err.(*RejectedError)
	if !ok || !errors.As(err, &rej) {
		t.Fatalf("Write = %v, want a *RejectedError", err)
	}
	if len(rej.Rejected) != 4 || rej.Candles()[0].Symbol != "HUGE" || !strings.Contains(rej.Rejected[0].Reason, "DECIMAL(38,18)") {
		t.Fatalf("rejected = %+v", rej.Rejected)
	}
	if !strings.Contains(err.Error(), "dead-letter") {
		t.Errorf("error %q does not say what to do", err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkObjects(t, readDir(t, dir), expectedObjects("", append(good, edge)))
	if got := counter(t, reg, "kandle_s3parquet_candles_rejected_total"); got != 4 {
		t.Errorf("candles_rejected_total = %v, want 4", got)
	}
}

// TestCorruptObject: an existing object that is not Parquet is a permanent
// error (no endless retry) naming the object and what to do; the candles
// stay buffered.
func TestCorruptObject(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := gen("BAD")[0]
	p := filepath.Join(dir, filepath.FromSlash(PartitionPath(c.Timeframe, c.Symbol, c.OpenTime)))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("not parquet"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, Config{URL: "file://" + dir}, WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, []candle.Candle{c}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = s.Flush(ctx)
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "delete") {
		t.Fatalf("Flush = %v (ctx %v), want a prompt error naming %s", err, ctx.Err(), p)
	}
	if s.rows != 1 {
		t.Fatalf("buffered rows = %d, want 1", s.rows)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "url is empty"},
		{Config{URL: "http://x"}, "unsupported scheme"},
		{Config{URL: "s3:///p"}, "no bucket"},
		{Config{URL: "file://rel/dir"}, "three slashes"},
		{Config{URL: "s3://b", Endpoint: "localhost:9000"}, "http:// or https://"},
		{Config{URL: "s3://b", FlushRows: -1}, "flush_rows"},
		{Config{URL: "s3://b", FlushAge: -time.Second}, "flush_age"},
	} {
		bad := tc.cfg.Validate()
		if len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), tc.want) {
			t.Errorf("Validate(%+v) = %q, want a message with %q", tc.cfg, bad, tc.want)
		}
	}
	ok := Config{URL: "s3://bucket/some/prefix/", Endpoint: "http://127.0.0.1:4569", Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")}
	if bad := ok.Validate(); len(bad) != 0 {
		t.Errorf("valid config: %q", bad)
	}
	loc, _ := parseURL(ok.URL)
	if loc.bucket != "bucket" || loc.prefix != "some/prefix" {
		t.Errorf("parseURL = %+v", loc)
	}
	if _, err := New(context.Background(), Config{URL: "ftp://x"}); err == nil || !strings.Contains(err.Error(), "s3://bucket/prefix") {
		t.Errorf("New with a bad url: %v", err)
	}
}

func TestEscapeSymbol(t *testing.T) {
	for in, want := range map[string]string{
		"BTCUSDT": "BTCUSDT", "BTC/USDT": "BTC%2FUSDT", "a b+c%d": "a%20b%2Bc%25d",
		"x=y": "x%3Dy", "..": "..", "é": "%C3%A9", "Ab-_.~9": "Ab-_.~9",
	} {
		got := EscapeSymbol(in)
		if got != want {
			t.Errorf("EscapeSymbol(%q) = %q, want %q", in, got, want)
		}
		back, err := UnescapeSymbol(got)
		if err != nil || back != in {
			t.Errorf("UnescapeSymbol(%q) = %q, %v; want %q", got, back, err, in)
		}
	}
	open := time.Date(2026, 1, 2, 23, 59, 0, 0, time.UTC).UnixMilli()
	if got := PartitionPath("1m", "BTC/USDT", open); got != "timeframe=1m/symbol=BTC%2FUSDT/year=2026/month=01/day=02/candles.parquet" {
		t.Errorf("PartitionPath = %s", got)
	}
}

func TestDecimalLimit(t *testing.T) {
	hi, lo := decimal.MustParse("100000000000000000000").Raw() // 10^20 ×10^18 = 10^38
	if hi != limitHi || lo != limitLo {
		t.Fatalf("10^38 = %x:%x, constants say %x:%x", hi, lo, uint64(limitHi), uint64(limitLo))
	}
}

// TestFlushBytes: the buffer is flushed once it holds about flush_bytes.
func TestFlushBytes(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	s, err := New(ctx, Config{URL: "file://" + t.TempDir(), FlushBytes: 10 * 210},
		WithRegisterer(reg), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	cs := gen("X")[:20] // 1m and 1h candles of one day: two objects
	if err := s.Write(ctx, cs[:9]); err != nil {
		t.Fatal(err)
	}
	if s.rows != 9 {
		t.Fatalf("flushed below flush_bytes: %d rows buffered", s.rows)
	}
	if err := s.Write(ctx, cs[9:11]); err != nil {
		t.Fatal(err)
	}
	if s.rows != 0 || counter(t, reg, "kandle_s3parquet_candles_written_total") != 11 {
		t.Fatalf("after passing flush_bytes: %d rows buffered", s.rows)
	}
}

// TestRowGroups: row_group_rows caps the rows of each row group.
func TestRowGroups(t *testing.T) {
	var cs []candle.Candle
	all := gen("X")
	for _, c := range all {
		if c.Timeframe == "1m" && dayOf(c.OpenTime) == dayOf(all[0].OpenTime)+1 {
			cs = append(cs, c)
		}
	}
	data, err := encode(cs, 100)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	groups := f.RowGroups()
	if len(groups) != 15 || groups[0].NumRows() != 100 || groups[14].NumRows() != 40 {
		t.Fatalf("1440 rows in %d row groups (first %d rows), want 15 of ≤100", len(groups), groups[0].NumRows())
	}
	back, err := Decode(data)
	if err != nil || len(back) != len(cs) || !back[1439].Equal(&cs[1439]) {
		t.Fatalf("decode across row groups: %d rows, %v", len(back), err)
	}
}

// TestMetricsNames: sinks with different names share a registerer; a
// second sink with the same name gets an error saying how to fix it.
func TestMetricsNames(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	cfg := Config{URL: "file://" + t.TempDir()}
	if _, err := New(ctx, cfg, WithRegisterer(reg), WithName("lake-a")); err != nil {
		t.Fatal(err)
	}
	if _, err := New(ctx, cfg, WithRegisterer(reg), WithName("lake-b")); err != nil {
		t.Fatal(err)
	}
	_, err := New(ctx, cfg, WithRegisterer(reg), WithName("lake-a"))
	if err == nil || !strings.Contains(err.Error(), "WithName") {
		t.Fatalf("duplicate name: %v", err)
	}
}
