package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/internal/testkit"
)

// get fetches url and returns its status and body (status 0 when nothing
// answers).
func get(url string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitHTTP polls url until check accepts the answer or within passes.
func waitHTTP(t *testing.T, h *sxHarness, url string, within time.Duration, what string, check func(code int, body string) bool) (int, string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		code, body := get(url)
		if check(code, body) {
			return code, body
		}
		h.running()
		if time.Now().After(deadline) {
			t.Fatalf("%s: after %v %s still answers %d %q", what, within, url, code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kandle may start before its stores and its broker: with DynamoDB, S3,
// Valkey and Kafka all down, `kandle run` stays up, answers /healthz
// (alive) and /readyz 503 naming what it waits for (a sink's store, then
// the brokers), logs why, and once everything is up it turns ready and
// every sink catches up exactly: nothing lost, nothing doubled.
func TestStartsBeforeItsStores(t *testing.T) {
	testkit.WallClockTest(t)
	h := newSXHarness(t)
	defer h.shutdown()
	h.redis.Stop()
	h.s3.stop()
	h.ddb.Stop()
	h.stopBroker()
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	h.runArgs = []string{"-metrics", addr}
	h.startRun()

	_, body := waitHTTP(t, h, "http://"+addr+"/readyz", 30*time.Second, "while the stores are down",
		func(code int, body string) bool {
			return code == http.StatusServiceUnavailable && strings.Contains(body, "store unreachable")
		})
	if !strings.Contains(body, "not ready: sink ") {
		t.Errorf("/readyz body %q does not name the sink it waits for", body)
	}
	// The engine does not exist yet (kandle waits for the sinks' stores),
	// but the first scrape already has the readiness gauges.
	if _, metrics := get("http://" + addr + "/metrics"); !strings.Contains(metrics, "\nkandle_ready 0\n") ||
		!strings.Contains(metrics, "\nkandle_unready{check=\"starting\"} 1\n") {
		t.Errorf("/metrics while waiting for the stores has no kandle_ready 0 and kandle_unready{check=\"starting\"} 1:\n%s", metrics)
	}
	if code, body := get("http://" + addr + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while waiting for the stores: %d %q, want 200 (alive, only not ready)", code, body)
	}
	if !strings.Contains(h.log.String(), "sink store unreachable; waiting for it") {
		t.Errorf("no log line says kandle waits for an unreachable store")
	}

	h.startDynalite()
	h.s3.restart()
	h.startRedis()
	// The stores answer; the broker is still down: kandle waits for it.
	waitHTTP(t, h, "http://"+addr+"/readyz", 60*time.Second, "while the broker is down",
		func(code int, body string) bool {
			return code == http.StatusServiceUnavailable && strings.Contains(body, "brokers")
		})
	if !strings.Contains(h.log.String(), "waiting for the brokers") {
		t.Errorf("no log line says kandle waits for the brokers")
	}
	h.startBroker()
	cfg := sxStream(1500, 70*time.Minute)
	h.produce(cfg, 0)
	h.waitClosed(cfg, 60*time.Second)
	want := h.waitSettled(cfg, 60*time.Second) // the closers' candles too
	h.waitSinks(want, wantLedger(t, cfg), 60*time.Second)

	waitHTTP(t, h, "http://"+addr+"/readyz", 30*time.Second, "after the stores came up",
		func(code int, body string) bool { return code == http.StatusOK && body == "ready\n" })
	_, metrics := get("http://" + addr + "/metrics")
	if !strings.Contains(metrics, "\nkandle_ready 1\n") {
		t.Errorf("/metrics has no kandle_ready 1 once ready")
	}
}
