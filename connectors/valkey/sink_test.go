package valkey

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
)

func TestActivePublishesAndStoresHash(t *testing.T) {
	srv := startRedis(t)
	r := reader(t, srv.Addr)
	s := newSink(t, srv.Addr, func(c *Config) { c.Coalesce = 0; c.KeyPrefix = "t:" })
	sub := subscribe(t, r, "t:pub:candle:1m:BTC/USDT")

	c := mk("BTC/USDT", 100, "65000.1", "65010", "64990.5", "65005.25", "0.3", "19501.5", 3)
	s.Active(c)
	m := recv(t, sub)
	if m.Final || m.Candle != c {
		t.Fatalf("published %+v, want %+v final=false", m, c)
	}
	waitFor(t, 5*time.Second, func() bool { return len(hgetall(t, r, "t:candle:active:1m:BTC/USDT")) > 0 }, "hash")
	wantHash(t, hgetall(t, r, "t:candle:active:1m:BTC/USDT"), c)

	pttl, err := r.Do(context.Background(), r.B().Pttl().Key("t:candle:active:1m:BTC/USDT").Build()).AsInt64()
	if err != nil || pttl <= 110_000 || pttl > 120_000 { // default: twice the 1m window
		t.Fatalf("PTTL = %d, %v; want about 120000", pttl, err)
	}
	isMember, err := r.Do(context.Background(), r.B().Sismember().Key("t:active:symbols").Member("BTC/USDT").Build()).AsBool()
	if err != nil || !isMember {
		t.Fatalf("SISMEMBER active:symbols = %v, %v", isMember, err)
	}
}

func TestFinalWriteFlush(t *testing.T) {
	srv := startRedis(t)
	r := reader(t, srv.Addr)
	s := newSink(t, srv.Addr, func(c *Config) { c.ActiveTTL = time.Hour })
	sub := subscribe(t, r, "pub:candle:1m:ETH")

	c1 := mk("ETH", 10, "3000", "3001", "2999", "3000.5", "1.5", "4500.75", 2)
	c2 := mk("ETH", 11, "3000.5", "3000.5", "3000.5", "3000.5", "0", "0", 0)
	c2.Gap = true
	ctx := context.Background()
	if err := s.Write(ctx, []candle1{c1, c2}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Flush returned: the hash already holds the newest final.
	wantHash(t, hgetall(t, r, "candle:active:1m:ETH"), c2)
	for _, want := range []candle1{c1, c2} {
		if m := recv(t, sub); !m.Final || m.Candle != want {
			t.Fatalf("published %+v, want %+v final=true", m, want)
		}
	}
	pttl, _ := r.Do(ctx, r.B().Pttl().Key("candle:active:1m:ETH").Build()).AsInt64()
	if pttl <= 3_500_000 {
		t.Fatalf("PTTL = %d, want the fixed active_ttl of 1h", pttl)
	}

	// Redelivery of the same finals is an idempotent upsert.
	if err := s.Write(ctx, []candle1{c1, c2}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	wantHash(t, hgetall(t, r, "candle:active:1m:ETH"), c2)
}

func TestRedeliveredOldFinalDoesNotClobberNewerActive(t *testing.T) {
	srv := startRedis(t)
	r := reader(t, srv.Addr)
	s := newSink(t, srv.Addr, func(c *Config) { c.Coalesce = time.Hour }) // flushed by hand
	sub := subscribe(t, r, "pub:candle:1m:SOL")
	ctx := context.Background()

	newer := mk("SOL", 21, "150", "151", "149", "150.5", "10", "1505", 4)
	s.Active(newer)
	if err := s.FlushActive(ctx); err != nil {
		t.Fatal(err)
	}
	recv(t, sub)

	older := mk("SOL", 20, "140", "152", "139", "150", "99", "14850", 40)
	if err := s.Write(ctx, []candle1{older}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, sub); !m.Final || m.Candle != older {
		t.Fatalf("the old final must still be published, got %+v", m)
	}
	wantHash(t, hgetall(t, r, "candle:active:1m:SOL"), newer)

	// A second sink (another process: no shared memory) is guarded by the
	// stored open_time, too.
	other := newSink(t, srv.Addr, nil)
	if err := other.Write(ctx, []candle1{older}); err != nil {
		t.Fatal(err)
	}
	if err := other.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	wantHash(t, hgetall(t, r, "candle:active:1m:SOL"), newer)

	// A late update of an older window through Active: published, not stored.
	late := mk("SOL", 20, "140", "152", "139", "150", "100", "15000", 41)
	s.Active(late)
	if err := s.FlushActive(ctx); err != nil {
		t.Fatal(err)
	}
	recv(t, sub) // the second sink's final
	if m := recv(t, sub); m.Final || m.Candle != late {
		t.Fatalf("late active update: got %+v", m)
	}
	wantHash(t, hgetall(t, r, "candle:active:1m:SOL"), newer)

	// A newer window and a late update of an older one pending together:
	// both are published, the hash keeps the newer.
	w25 := mk("SOL", 25, "3", "3", "3", "3", "1", "3", 1)
	w24 := mk("SOL", 24, "4", "4", "4", "4", "1", "4", 2)
	s.Active(w25)
	s.Active(w24)
	if err := s.FlushActive(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[int64]pubMsg{}
	for range 2 {
		m := recv(t, sub)
		got[m.OpenTime] = m
	}
	if got[w25.OpenTime].Candle != w25 || got[w24.OpenTime].Candle != w24 {
		t.Fatalf("published %+v, want both windows", got)
	}
	wantHash(t, hgetall(t, r, "candle:active:1m:SOL"), w25)

	// A final in the same batch as a newer one: the newest wins regardless of order.
	c27 := mk("SOL", 27, "1", "1", "1", "1", "1", "1", 1)
	c26 := mk("SOL", 26, "2", "2", "2", "2", "2", "4", 1)
	if err := s.Write(ctx, []candle1{c27, c26}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	wantHash(t, hgetall(t, r, "candle:active:1m:SOL"), c27)
}

func TestCoalescing(t *testing.T) {
	srv := startRedis(t)
	r := reader(t, srv.Addr)
	s := newSink(t, srv.Addr, func(c *Config) { c.Coalesce = time.Hour })
	sub := subscribe(t, r, "pub:candle:1m:S7")

	var last [10]candle1
	for i := 0; i < 5000; i++ {
		c := mk("S"+itoa(i%10), 1, "1", "2", "1", itoa(i+1), itoa(i+1), "1", int64(i/10+1))
		last[i%10] = c
		s.Active(c)
	}
	if got := s.RoundTrips(); got != 0 {
		t.Fatalf("%d round trips before the coalesce tick, want 0", got)
	}
	if err := s.FlushActive(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.RoundTrips(); got != 1 {
		t.Fatalf("5000 Active calls on 10 keys took %d round trips, want 1", got)
	}
	for i := range last {
		wantHash(t, hgetall(t, r, "candle:active:1m:S"+itoa(i)), last[i])
	}
	if m := recv(t, sub); m.Candle != last[7] {
		t.Fatalf("S7 published %+v, want only the newest %+v", m.Candle, last[7])
	}
	select {
	case m := <-sub:
		t.Fatalf("superseded update published: %+v", m)
	default:
	}

	// A flush of many keys is split into pipelines of maxPipeline candles.
	before := s.RoundTrips()
	for i := 0; i < 2*maxPipeline+10; i++ {
		s.Active(mk("K"+itoa(i), 1, "1", "1", "1", "1", "1", "1", 1))
	}
	if err := s.FlushActive(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.RoundTrips() - before; got != 3 {
		t.Fatalf("%d keys took %d round trips, want 3", 2*maxPipeline+10, got)
	}
	n, err := r.Do(context.Background(), r.B().Scard().Key("active:symbols").Build()).AsInt64()
	if err != nil || n != 2*maxPipeline+10+10 {
		t.Fatalf("SCARD active:symbols = %d, %v", n, err)
	}

	// The ticker flushes on its own.
	fast := newSink(t, srv.Addr, func(c *Config) { c.Coalesce = 20 * time.Millisecond })
	c := mk("S7", 2, "5", "5", "5", "5", "1", "5", 1)
	fast.Active(c)
	if m := recv(t, sub); m.Candle != c {
		t.Fatalf("ticker flush published %+v", m.Candle)
	}
}

func TestAuth(t *testing.T) {
	srv := startRedis(t, "--requirepass", "pw")
	cfg := DefaultConfig(srv.Addr)
	if _, err := New(context.Background(), cfg); err == nil {
		t.Fatal("New without a password succeeded against requirepass")
	}
	cfg.PasswordEnv = "KANDLE_TEST_VALKEY_PASSWORD"
	t.Setenv(cfg.PasswordEnv, "")
	if _, err := New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "KANDLE_TEST_VALKEY_PASSWORD is unset or empty") {
		t.Fatalf("New with an empty password_env variable: %v, want an error naming it", err)
	}
	t.Setenv(cfg.PasswordEnv, "pw")
	s := newSink(t, srv.Addr, func(c *Config) { c.PasswordEnv = "KANDLE_TEST_VALKEY_PASSWORD"; c.Coalesce = 0 })
	r := reader(t, srv.Addr, func(o *valkey.ClientOption) { o.Password = "pw" })
	c := mk("ADA", 5, "0.5", "0.6", "0.4", "0.55", "1000", "550", 9)
	if err := s.Write(context.Background(), []candle1{c}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantHash(t, hgetall(t, r, "candle:active:1m:ADA"), c)

	// An ACL user and a database other than 0.
	acl := startRedis(t, "--user", "alice", "on", ">secret", "~*", "&*", "+@all")
	s2 := newSink(t, acl.Addr, func(c *Config) { c.Username, c.Password, c.DB = "alice", "secret", 3 })
	if err := s2.Write(context.Background(), []candle1{c}); err != nil {
		t.Fatal(err)
	}
	if err := s2.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	r2 := reader(t, acl.Addr, func(o *valkey.ClientOption) { o.Username, o.Password, o.SelectDB = "alice", "secret", 3 })
	wantHash(t, hgetall(t, r2, "candle:active:1m:ADA"), c)
}

func TestRejected(t *testing.T) {
	srv := startRedis(t)
	r := reader(t, srv.Addr)
	s := newSink(t, srv.Addr, nil)
	ctx := context.Background()
	if err := r.Do(ctx, r.B().Set().Key("candle:active:1m:BAD").Value("x").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	good := mk("GOOD", 1, "1", "1", "1", "1", "1", "1", 1)
	wrongType := mk("BAD", 1, "1", "1", "1", "1", "1", "1", 1)
	noSymbol := mk("", 1, "1", "1", "1", "1", "1", "1", 1)

	var rej *RejectedError
	if err := s.Write(ctx, []candle1{good, noSymbol, wrongType}); !errors.As(err, &rej) ||
		len(rej.Rejected) != 1 || rej.Rejected[0] != noSymbol {
		t.Fatalf("Write: %v, want the candle without a symbol rejected", err)
	}
	if err := s.Flush(ctx); !errors.As(err, &rej) || len(rej.Rejected) != 1 || rej.Rejected[0] != wrongType {
		t.Fatalf("Flush: %v, want the WRONGTYPE candle rejected", err)
	}
	wantHash(t, hgetall(t, r, "candle:active:1m:GOOD"), good)
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("rejected candles must leave the buffer: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	bad := Config{Addrs: []string{"nohost"}, DB: -1, TLSInsecureSkipVerify: true, Username: "u",
		Coalesce: -time.Second, ActiveTTL: -1, Timeout: -1}
	if errs := bad.Validate(); len(errs) != 7 {
		t.Fatalf("Validate: %d messages, want 7: %q", len(errs), errs)
	}
	if errs := (&Config{Addrs: []string{"h:1"}, Username: "u", PasswordEnv: "hunter2!"}).Validate(); len(errs) != 1 || !strings.Contains(errs[0], "password_env") {
		t.Fatalf("a password where its variable's name belongs: %q", errs)
	}
	if errs := (&Config{}).Validate(); len(errs) != 1 {
		t.Fatalf("empty config: %q", errs)
	}
	good := DefaultConfig("127.0.0.1:6379")
	if errs := good.Validate(); len(errs) != 0 {
		t.Fatalf("default config: %q", errs)
	}
	if _, err := New(context.Background(), bad); err == nil {
		t.Fatal("New accepted an invalid config")
	}
}

func TestWriteFlushesLargeBuffer(t *testing.T) {
	srv := startRedis(t)
	r := reader(t, srv.Addr)
	s := newSink(t, srv.Addr, nil)
	cs := make([]candle1, maxBuffered+5)
	for i := range cs {
		cs[i] = mk("B"+itoa(i), 1, "1", "1", "1", "1", "1", "1", 1)
	}
	if err := s.Write(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	// No Flush: Write stored them itself because the buffer was full.
	n, err := r.Do(context.Background(), r.B().Scard().Key("active:symbols").Build()).AsInt64()
	if err != nil || n != int64(len(cs)) {
		t.Fatalf("SCARD = %d, %v; want %d", n, err, len(cs))
	}
	wantHash(t, hgetall(t, r, "candle:active:1m:B"+itoa(maxBuffered+4)), cs[maxBuffered+4])
}

// A key that holds another type (WRONGTYPE) rejects only its own live
// updates: FlushActive succeeds, every other key keeps being stored and
// published, and the rejection is counted. (It used to fail the whole
// pipeline, so the flush goroutine retried it forever and froze every key.)
func TestActiveWrongTypeIsolated(t *testing.T) {
	srv := startRedis(t)
	r := reader(t, srv.Addr)
	s := newSink(t, srv.Addr, func(c *Config) { c.Coalesce = 0 })
	ctx := context.Background()
	if err := r.Do(ctx, r.B().Set().Key("candle:active:1m:BAD").Value("x").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	pub := subscribe(t, r, "pub:candle:1m:GOOD")
	for n := int64(1); n <= 3; n++ {
		good := mk("GOOD", 1, "1", itoa(int(n)), "1", "1", "1", "1", n)
		s.Active(mk("BAD", 1, "1", "1", "1", "1", "1", "1", n))
		s.Active(good)
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.FlushActive(fctx)
		cancel()
		if err != nil {
			t.Fatalf("FlushActive %d with a WRONGTYPE key: %v", n, err)
		}
		wantHash(t, hgetall(t, r, "candle:active:1m:GOOD"), good)
		recv(t, pub)
	}
	if got := counter(s.m.activeRejected); got != 3 {
		t.Fatalf("active_rejected_total = %v, want 3", got)
	}
	if v, err := r.Do(ctx, r.B().Get().Key("candle:active:1m:BAD").Build()).ToString(); err != nil || v != "x" {
		t.Fatalf("the foreign key was touched: %q %v", v, err)
	}
}

// The password can come from a file (a mounted secret) instead of the
// environment; an unreadable or empty file stops New with what to do.
func TestAuthFromFile(t *testing.T) {
	srv := startRedis(t, "--requirepass", "file pw")
	dir := t.TempDir()
	cfg := DefaultConfig(srv.Addr)
	cfg.PasswordFile = filepath.Join(dir, "missing")
	if _, err := New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "password_file") {
		t.Fatalf("New with a missing password file: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.PasswordFile = empty
	if _, err := New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Fatalf("New with an empty password file: %v", err)
	}
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("file pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, srv.Addr, func(c *Config) { c.PasswordFile = secret })
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	both := DefaultConfig(srv.Addr)
	both.PasswordEnv, both.PasswordFile = "X", secret
	if errs := both.Validate(); len(errs) != 1 || !strings.Contains(errs[0], "not both") {
		t.Fatalf("Validate with password_env and password_file: %q", errs)
	}
}
