package valkey

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/internal/testkit"
	"github.com/valkey-io/valkey-go"
)

// TLS with verification on: a server whose CA is unknown is refused,
// tls_ca_file trusts a private CA, tls_insecure_skip_verify accepts any.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certs := testkit.TLS(t)
	port := testkit.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ready := func() error {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err
	}
	testkit.Start(t, "redis-server-tls", addr, ready, "redis-server", []string{"--bind", "127.0.0.1",
		"--port", "0", "--tls-port", fmt.Sprint(port), "--tls-cert-file", certs.ServerCert, "--tls-key-file", certs.ServerKey,
		"--tls-ca-cert-file", certs.CA, "--tls-auth-clients", "no", "--save", "", "--appendonly", "no", "--dir", dir})
	ctx := context.Background()

	// Verification is on by default: a server signed by an unknown CA is refused.
	cfg := DefaultConfig(addr)
	cfg.TLS, cfg.Timeout = true, 2*time.Second
	if s, err := New(ctx, cfg); err == nil {
		_ = s.Close(ctx)
		t.Fatal("connected to a server signed by an unknown CA without tls_ca_file")
	}
	// A file that holds no certificate is a clear error.
	cfg.TLSCAFile = certs.ServerKey
	if _, err := New(ctx, cfg); err == nil || !strings.Contains(err.Error(), "tls_ca_file") {
		t.Fatalf("tls_ca_file without a certificate: %v", err)
	}
	// With tls_ca_file naming the private CA it connects.
	s := newSink(t, addr, func(c *Config) { c.TLS, c.TLSCAFile = true, certs.CA })
	c := mk("TLS", 1, "1", "1", "1", "1", "1", "1", 1)
	if err := s.Write(ctx, []candle1{c}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// tls_insecure_skip_verify accepts it as well.
	s2 := newSink(t, addr, func(c *Config) { c.TLS = true; c.TLSInsecureSkipVerify = true; c.Coalesce = 0 })
	c2 := mk("TLS", 2, "2", "2", "2", "2", "2", "4", 1)
	s2.Active(c2)
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(certs.CA)
	if err != nil || !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("read %s: %v", certs.CA, err)
	}
	r := reader(t, addr, func(o *valkey.ClientOption) { o.TLSConfig = &tls.Config{RootCAs: pool} })
	waitFor(t, 5*time.Second, func() bool { return hgetall(t, r, "candle:active:1m:TLS")["open_time"] == fmt.Sprint(c2.OpenTime) },
		"active update over TLS")
	wantHash(t, hgetall(t, r, "candle:active:1m:TLS"), c2)
	if errs := (&Config{Addrs: []string{addr}, TLSCAFile: certs.CA}).Validate(); len(errs) != 1 {
		t.Fatalf("tls_ca_file without tls: %q", errs)
	}
}
