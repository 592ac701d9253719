package valkey

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kandle/kandle/internal/testkit"
	"github.com/valkey-io/valkey-go"
)

// selfSigned writes a certificate for 127.0.0.1 and its key to dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kandle-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
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
		"--port", "0", "--tls-port", fmt.Sprint(port), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", certFile, "--tls-auth-clients", "no", "--save", "", "--appendonly", "no", "--dir", dir})
	ctx := context.Background()

	// Verification is on by default: a self-signed server is refused.
	cfg := DefaultConfig(addr)
	cfg.TLS, cfg.Timeout = true, 2*time.Second
	if s, err := New(ctx, cfg); err == nil {
		_ = s.Close(ctx)
		t.Fatal("connected to a self-signed server without tls_insecure_skip_verify")
	}
	// With the CA supplied through WithClientOption it connects.
	s := newSink(t, addr, func(c *Config) { c.TLS = true }, WithClientOption(func(o *valkey.ClientOption) {
		o.TLSConfig.RootCAs = pool
	}))
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
	r := reader(t, addr, func(o *valkey.ClientOption) { o.TLSConfig = &tls.Config{RootCAs: pool} })
	waitFor(t, 5*time.Second, func() bool { return hgetall(t, r, "candle:active:1m:TLS")["open_time"] == fmt.Sprint(c2.OpenTime) },
		"active update over TLS")
	wantHash(t, hgetall(t, r, "candle:active:1m:TLS"), c2)
}
