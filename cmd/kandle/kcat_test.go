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

	// The trades lie in the last minutes, as a live feed's do. Minute 0 is
	// ten minutes ago. BTC 0: q = 100.5×0.1 + 101×0.2 + 99.5×0.7 = 99.9; the
	// minute-5 trades close minutes 0–3 (lateness 2s).
	base := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	at := func(d time.Duration) string { return base.Add(d).Format("2006-01-02T15:04:05.000Z") }
	ms := func(d time.Duration) int64 { return base.Add(d).UnixMilli() }
	lines := []string{
		fmt.Sprintf(`BTC:{"symbol":"BTC","ts":"%s","price":"100.5","qty":"0.1","trade_id":1}`, at(time.Second)),
		fmt.Sprintf(`BTC:{"symbol":"BTC","ts":"%s","price":"101","qty":"0.2","trade_id":2}`, at(30*time.Second)),
		fmt.Sprintf(`BTC:{"symbol":"BTC","ts":"%s","price":"99.5","qty":"0.7","trade_id":3}`, at(time.Minute-time.Millisecond)),
		fmt.Sprintf(`BTC:{"symbol":"BTC","ts":"%s","price":"101","qty":"0.2","trade_id":"2"}`, at(30*time.Second)),
		fmt.Sprintf(`ETH:{"symbol":"ETH","ts":%d,"price":2000,"qty":1,"trade_id":10}`, ms(10*time.Second)),
		fmt.Sprintf(`ETH:{"symbol":"ETH","ts":%d,"price":2010,"qty":2,"trade_id":11}`, ms(2*time.Minute+10*time.Second)),
		`BTC:not json at all`,
		fmt.Sprintf(`BTC:{"symbol":"BTC","ts":"%s","price":"102","qty":"1","trade_id":4}`, at(5*time.Minute)),
		fmt.Sprintf(`ETH:{"symbol":"ETH","ts":"%s","price":"2020","qty":"1","trade_id":12}`, at(5*time.Minute)),
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
  1m: {kind: candles, from: trades, timeframe: 1m, output: {topic: candles.1m, partitions: 1}}
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
		"1m BTC +0 o=100.5 h=101 l=99.5 c=99.5 v=1 q=99.9 n=3 gap=false",
		"1m BTC +1 o=99.5 h=99.5 l=99.5 c=99.5 v=0 q=0 n=0 gap=true",
		"1m BTC +2 o=99.5 h=99.5 l=99.5 c=99.5 v=0 q=0 n=0 gap=true",
		"1m BTC +3 o=99.5 h=99.5 l=99.5 c=99.5 v=0 q=0 n=0 gap=true",
		"1m ETH +0 o=2000 h=2000 l=2000 c=2000 v=1 q=2000 n=1 gap=false",
		"1m ETH +1 o=2000 h=2000 l=2000 c=2000 v=0 q=0 n=0 gap=true",
		"1m ETH +2 o=2010 h=2010 l=2010 c=2010 v=2 q=4020 n=1 gap=false",
		"1m ETH +3 o=2010 h=2010 l=2010 c=2010 v=0 q=0 n=0 gap=true",
	}
	var got []string
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := exec.Command(kcat, "-b", addr, "-C", "-t", "candles.1m", "-o", "beginning", "-e", "-q",
			"-X", "isolation.level=read_committed", "-f", "%s\n").CombinedOutput()
		got = got[:0]
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			// Minutes 0–3 are what the trades close; once the partitions are
			// caught up and quiet for idle_timeout, the wall clock closes the
			// later minutes too, up to now.
			if c, err := candle.ParseJSON([]byte(l)); err == nil && c.OpenTime <= ms(3*time.Minute) {
				got = append(got, fmt.Sprintf("%s %s +%d o=%s h=%s l=%s c=%s v=%s q=%s n=%d gap=%v", c.Timeframe, c.Symbol,
					(c.OpenTime-ms(0))/time.Minute.Milliseconds(), c.Open, c.High, c.Low, c.Close, c.Volume, c.QuoteVolume, c.Trades, c.Gap))
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
