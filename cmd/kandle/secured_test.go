package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kandle/kandle/internal/testkit"
)

// `kandle dev-broker` with --tls-cert/--tls-key/--sasl-user is a secured
// cluster an independent client can use: kcat produces over SASL_SSL with
// SCRAM-SHA-256, `kandle gen -t` produces with a topology's kafka block,
// and kcat reads both back through the same secured connection.
func TestKcatThroughSecuredDevBroker(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatal("kcat is not installed: run `bash scripts/test-deps.sh` (Debian package kcat)")
	}
	files := testkit.TLS(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var brokerOut bytes.Buffer
	wg.Add(1)
	go func() {
		defer wg.Done()
		realMain(ctx, []string{"dev-broker", "--listen", addr, "--partitions", "1", "--topics", "trades",
			"--tls-cert", files.ServerCert, "--tls-key", files.ServerKey, "--sasl-user", "alice:wonder land", "--sasl-user", "bob:builder"}, &brokerOut, &brokerOut)
	}()
	waitTCP(t, addr)
	secured := []string{"-b", addr, "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-256",
		"-X", "sasl.username=alice", "-X", "sasl.password=wonder land", "-X", "ssl.ca.location=" + files.CA}

	in := filepath.Join(t.TempDir(), "trades.txt")
	lines := []string{
		`BTC:{"symbol":"BTC","ts":1767607201000,"price":"100.5","qty":"0.1","trade_id":1}`,
		`ETH:{"symbol":"ETH","ts":1767607202000,"price":"2000","qty":"1","trade_id":2}`,
	}
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(kcat, append(secured, "-P", "-t", "trades", "-K:", "-l", in)...).CombinedOutput(); err != nil {
		t.Fatalf("kcat produce over SASL_SSL/SCRAM-SHA-256: %v\n%s\ndev broker: %s", err, out, brokerOut.String())
	}

	top := filepath.Join(t.TempDir(), "secured.yaml")
	if err := os.WriteFile(top, []byte(fmt.Sprintf(`
name: secured
brokers: [%s]
kafka:
  tls: {enabled: true, ca_file: %s}
  sasl: {mechanism: scram-sha-512, username: bob, password_env: KANDLE_TEST_KAFKA_PASSWORD}
sources:
  trades: {topic: trades, partitions: 1}
processors:
  1m: {kind: candles, from: trades, timeframe: 1m}
`, addr, files.CA)), 0o644); err != nil {
		t.Fatal(err)
	}
	var genOut bytes.Buffer
	// Without the password variable gen stops before connecting, naming it.
	if code := realMain(ctx, []string{"gen", "-t", top, "-brokers", addr, "-count", "5"}, &genOut, &genOut); code == 0 ||
		!strings.Contains(genOut.String(), "environment variable KANDLE_TEST_KAFKA_PASSWORD is unset or empty") {
		t.Fatalf("gen without the password variable: exit %d\n%s", code, genOut.String())
	}
	t.Setenv("KANDLE_TEST_KAFKA_PASSWORD", "builder")
	genOut.Reset()
	if code := realMain(ctx, []string{"gen", "-t", top, "-brokers", addr, "-count", "5", "-dup-rate", "0", "-malformed-rate", "0"}, &genOut, &genOut); code != 0 {
		t.Fatalf("gen -t over SASL_SSL/SCRAM-SHA-512: exit %d\n%s", code, genOut.String())
	}

	out, err := exec.Command(kcat, append(secured, "-C", "-t", "trades", "-o", "beginning", "-e", "-q", "-f", "%k:%s\n")...).CombinedOutput()
	if err != nil {
		t.Fatalf("kcat consume over SASL_SSL: %v\n%s", err, out)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(got) != len(lines)+5 || strings.Join(got[:len(lines)], "\n") != strings.Join(lines, "\n") {
		t.Fatalf("kcat read back:\n%s\nwant kcat's %d records, then gen's 5", out, len(lines))
	}

}
