package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kandle/kandle/internal/testkit"
)

var dashboardSeries = regexp.MustCompile(`\bkandle_[a-z0-9_]+`)

// usedSeries returns the kandle series the Grafana dashboard (panel and
// variable queries) and the Prometheus alerts use, each with where.
func usedSeries(t *testing.T) map[string][]string {
	t.Helper()
	root := testkit.RepoRoot(t)
	used := map[string][]string{}
	add := func(where, expr string) {
		for _, s := range dashboardSeries.FindAllString(expr, -1) {
			used[s] = append(used[s], where)
		}
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "grafana", "kandle-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	var walk func(v any, title string)
	walk = func(v any, title string) {
		switch x := v.(type) {
		case map[string]any:
			if s, ok := x["title"].(string); ok {
				title = s
			}
			for k, e := range x {
				if s, ok := e.(string); ok && (k == "expr" || k == "definition") {
					add("dashboard panel "+title, s)
				}
				walk(e, title)
			}
		case []any:
			for _, e := range x {
				walk(e, title)
			}
		}
	}
	walk(dash, "")
	raw, err = os.ReadFile(filepath.Join(root, "deploy", "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			add("alert "+r.Alert, r.Expr)
		}
	}
	if len(used) < 10 {
		t.Fatalf("found only %d series in the dashboard and alerts", len(used))
	}
	return used
}

// scrapeSeries returns the series names on a /metrics page.
func scrapeSeries(url string) (map[string]bool, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	out := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if i := strings.IndexAny(l, "{ "); i > 0 {
			out[l[:i]] = true
		}
	}
	return out, sc.Err()
}

// TestDashboardAndAlertMetricsExist runs `kandle run` as deployed (DynamoDB,
// S3 Parquet and Valkey sinks, a silence processor, static membership,
// metrics on) over a stream with duplicates
// and malformed records, and checks that every series the Grafana dashboard
// and the Prometheus alerts use is on its /metrics: a renamed or removed
// metric cannot leave a panel or an alert silently empty.
func TestDashboardAndAlertMetricsExist(t *testing.T) {
	testkit.WallClockTest(t)
	used := usedSeries(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	h := newSXHarnessWith(t, func(top string) string {
		top = strings.Replace(top, `metrics: ""`, "metrics: "+addr, 1)
		// A revision horizon (the revisions panel), as the shipped topologies set.
		top = strings.Replace(top, "1m: {kind: candles, from: trades, timeframe: 1m,", "1m: {kind: candles, from: trades, timeframe: 1m, revise_within: 1h,", 1)
		// A silence processor too (the dashboard's events panel): quiet
		// symbols' events, levels far beyond the test.
		return strings.Replace(top, "\ndead_letter:", "\n  quiet: {kind: silence, from: trades, levels: [{name: quiet, after: 1h}], output: {topic: sx.quiet, partitions: 1}}\ndead_letter:", 1)
	})
	defer h.shutdown()
	cfg := sxStream(600, 30*time.Minute)
	h.runArgs = []string{"-static-membership"} // as the Helm chart runs it
	h.startRun()
	h.produce(cfg, 0)
	h.waitClosed(cfg, 60*time.Second)

	var missing []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		have, err := scrapeSeries("http://" + addr + "/metrics")
		missing = missing[:0]
		if err == nil {
			for s := range used {
				if !have[s] {
					missing = append(missing, s)
				}
			}
		}
		if err == nil && len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			sort.Strings(missing)
			var b strings.Builder
			for _, s := range missing {
				fmt.Fprintf(&b, "\n  %s (used by %s)", s, strings.Join(used[s], ", "))
			}
			t.Fatalf("series the dashboard or the alerts use that kandle run does not expose (scrape error %v):%s", err, b.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
}
