package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/internal/testkit"
)

// kcat, an independent Kafka client, produces trades to `kandle dev-broker`;
// `kandle run` turns them into candles; kcat reads the candles back and
// they are exactly the ones the trades make.
func TestKcatThroughDevBroker(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatal("kcat is not installed: run `bash scripts/test-deps.sh` (Debian package kcat)")
	}
	port := testkit.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var brokerOut bytes.Buffer
	wg.Add(1)
	go func() {
		defer wg.Done()
		realMain(ctx, []string{"dev-broker", "--listen", addr, "--partitions", "2", "--topics", "trades"}, &brokerOut, &brokerOut)
	}()
	waitTCP(t, addr)

	// BTC 10:00: q = 100.5×0.1 + 101×0.2 + 99.5×0.7 = 99.9; the 10:05 trades close 10:00–10:03 (lateness 1s).
	lines := []string{
		`BTC:{"symbol":"BTC","ts":"2026-01-05T10:00:01Z","price":"100.5","qty":"0.1","trade_id":1}`,
		`BTC:{"symbol":"BTC","ts":"2026-01-05T10:00:30Z","price":"101","qty":"0.2","trade_id":2}`,
		`BTC:{"symbol":"BTC","ts":"2026-01-05T10:00:59.999Z","price":"99.5","qty":"0.7","trade_id":3}`,
		`BTC:{"symbol":"BTC","ts":"2026-01-05T10:00:30Z","price":"101","qty":"0.2","trade_id":"2"}`,
		`ETH:{"symbol":"ETH","ts":1767607210000,"price":2000,"qty":1,"trade_id":10}`,
		`ETH:{"symbol":"ETH","ts":1767607330000,"price":2010,"qty":2,"trade_id":11}`,
		`BTC:not json at all`,
		`BTC:{"symbol":"BTC","ts":"2026-01-05T10:05:00Z","price":"102","qty":"1","trade_id":4}`,
		`ETH:{"symbol":"ETH","ts":"2026-01-05T10:05:00Z","price":"2020","qty":"1","trade_id":12}`,
	}
	in := filepath.Join(t.TempDir(), "trades.txt")
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(kcat, "-b", addr, "-P", "-t", "trades", "-K:", "-X", "partitioner=murmur2_random", "-l", in).CombinedOutput(); err != nil {
		t.Fatalf("kcat produce: %v\n%s", err, out)
	}

	metricsAddr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	top := filepath.Join(t.TempDir(), "kcat.yaml")
	if err := os.WriteFile(top, []byte(fmt.Sprintf(`
name: kcat
brokers: [%s]
metrics: %s
commit_interval: 50ms
sources:
  trades: {topic: trades, partitions: 2}
processors:
  # The fixture's trades are pinned in the past (January 2026) and the test
  # expects exactly the candles they make, so idle advance stays off here:
  # a caught-up live partition would otherwise move its watermark to the
  # wall clock and add gap candles after them. Everything else is default.
  1m: {kind: candles, from: trades, timeframe: 1m, lateness: 1s, idle_timeout: 0s, output: {topic: candles.1m, partitions: 1}}
  5m: {kind: rollup, from: 1m, timeframe: 5m, output: {topic: candles.5m, partitions: 1}}
dead_letter: {topic: kcat.dlq}
`, addr, metricsAddr)), 0o644); err != nil {
		t.Fatal(err)
	}
	var runOut bytes.Buffer
	wg.Add(1)
	go func() {
		defer wg.Done()
		realMain(ctx, []string{"run", "-t", top, "-state-dir", t.TempDir(), "-instance", "kcat"}, &runOut, &runOut)
	}()

	want := []string{
		"1m BTC 10:00 o=100.5 h=101 l=99.5 c=99.5 v=1 q=99.9 n=3 gap=false",
		"1m BTC 10:01 o=99.5 h=99.5 l=99.5 c=99.5 v=0 q=0 n=0 gap=true",
		"1m BTC 10:02 o=99.5 h=99.5 l=99.5 c=99.5 v=0 q=0 n=0 gap=true",
		"1m BTC 10:03 o=99.5 h=99.5 l=99.5 c=99.5 v=0 q=0 n=0 gap=true",
		"1m ETH 10:00 o=2000 h=2000 l=2000 c=2000 v=1 q=2000 n=1 gap=false",
		"1m ETH 10:01 o=2000 h=2000 l=2000 c=2000 v=0 q=0 n=0 gap=true",
		"1m ETH 10:02 o=2010 h=2010 l=2010 c=2010 v=2 q=4020 n=1 gap=false",
		"1m ETH 10:03 o=2010 h=2010 l=2010 c=2010 v=0 q=0 n=0 gap=true",
	}
	var got []string
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := exec.Command(kcat, "-b", addr, "-C", "-t", "candles.1m", "-o", "beginning", "-e", "-q",
			"-X", "isolation.level=read_committed", "-f", "%s\n").CombinedOutput()
		got = got[:0]
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if c, err := candle.ParseJSON([]byte(l)); err == nil {
				got = append(got, fmt.Sprintf("%s %s %s o=%s h=%s l=%s c=%s v=%s q=%s n=%d gap=%v", c.Timeframe, c.Symbol,
					time.UnixMilli(c.OpenTime).UTC().Format("15:04"), c.Open, c.High, c.Low, c.Close, c.Volume, c.QuoteVolume, c.Trades, c.Gap))
			}
		}
		sortStrings(got)
		if err == nil && strings.Join(got, "\n") == strings.Join(want, "\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("candles read by kcat:\n%s\nwant:\n%s\nkandle log:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), runOut.String())
		}
		time.Sleep(300 * time.Millisecond)
	}
	// The malformed record and the duplicate id "2" (counted as 2) are dead-lettered with reason, partition and offset.
	out, err := exec.Command(kcat, "-b", addr, "-C", "-t", "kcat.dlq", "-o", "beginning", "-e", "-q",
		"-X", "isolation.level=read_committed", "-f", "%s\n").CombinedOutput()
	if err != nil {
		t.Fatalf("kcat dlq: %v %s", err, out)
	}
	dlq := string(out)
	for _, reason := range []string{`"reason":"malformed_json"`, `"reason":"duplicate"`} {
		if !strings.Contains(dlq, reason) || !strings.Contains(dlq, `"offset":`) || !strings.Contains(dlq, `"partition":`) {
			t.Errorf("dead letters lack %s:\n%s", reason, dlq)
		}
	}
	if n := strings.Count(strings.TrimSpace(dlq), "\n") + 1; n != 2 {
		t.Errorf("%d dead letters, want 2:\n%s", n, dlq)
	}
	// The same rejections are counted per reason on /metrics.
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		`kandle_rejected_total{reason="malformed_json",stage="1m"} 1`,
		`kandle_rejected_total{reason="duplicate",stage="1m"} 1`,
		`kandle_records_total{result="accepted",stage="1m"} 7`,
	} {
		if !strings.Contains(string(body), line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
}

func waitTCP(t *testing.T, addr string) {
	t.Helper()
	for i := 0; i < 200; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("nothing listens on %s", addr)
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
