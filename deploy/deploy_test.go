// Package deploy_test keeps the deployment files under deploy/ from rotting
// silently. Nothing here can run Docker or Kubernetes, so it checks what can
// be checked offline: every YAML/JSON file parses, the topologies validate
// with the real sink specs, every flag the files pass to kandle exists, the
// dashboard and alerts name only metrics engine/metrics.go registers (and
// the dashboard covers all of them), the StatefulSet derives -instance from
// the pod name and outlasts its transaction timeout on shutdown, and every
// alert's runbook points at a section of docs/operations.md.
package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kandle/kandle/connectors/dynamodb"
	"github.com/kandle/kandle/connectors/s3parquet"
	"github.com/kandle/kandle/connectors/valkey"
	"github.com/kandle/kandle/internal/sinks"
	"github.com/kandle/kandle/topology"
)

// sinkRegistry is the registry `kandle validate` uses, so sink blocks are
// decoded and validated exactly as kandle does.
func sinkRegistry() topology.Registry { return sinks.Registry() }

// readFile reads a file relative to deploy/ (the test's working directory).
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b
}

// yamlDocs decodes every document of a YAML file into generic maps.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, path)))
	var docs []map[string]any
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if m != nil {
			docs = append(docs, m)
		}
	}
}

// get walks a generic YAML/JSON value by map keys and list indexes.
func get(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("want a map holding %q, have %T (path %v)", k, v, path)
			}
			v, ok = m[k]
			if !ok {
				t.Fatalf("missing key %q (path %v)", k, path)
			}
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("want a list with index %d, have %T (path %v)", k, v, path)
			}
			v = l[k]
		}
	}
	return v
}

func str(t *testing.T, v any, path ...any) string {
	t.Helper()
	s, ok := get(t, v, path...).(string)
	if !ok {
		t.Fatalf("%v: want a string, have %T", path, get(t, v, path...))
	}
	return s
}

func strs(t *testing.T, v any, path ...any) []string {
	t.Helper()
	l, ok := get(t, v, path...).([]any)
	if !ok {
		t.Fatalf("%v: want a list", path)
	}
	out := make([]string, len(l))
	for i, e := range l {
		out[i] = str(t, e)
	}
	return out
}

// flagValues turns kandle arguments (after the command name) into name →
// value, accepting -name=value and -name value.
func flagValues(t *testing.T, args []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			t.Fatalf("argument %q is not a flag (args %q)", a, args)
		}
		name := strings.TrimLeft(a, "-")
		if k, v, ok := strings.Cut(name, "="); ok {
			out[k] = v
			continue
		}
		if i+1 >= len(args) {
			t.Fatalf("flag %s has no value (args %q)", a, args)
		}
		out[name] = args[i+1]
		i++
	}
	return out
}

// definedFlags greps the flag names registered in the given Go files
// (fs.String("name", …), fs.IntVar(&x, "name", …), fs.Var(v, "name", …)).
func definedFlags(t *testing.T, files ...string) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`fs\.[A-Z]\w*\([^"\n]*"([a-z][a-z0-9-]*)"`)
	out := map[string]bool{}
	for _, f := range files {
		for _, m := range re.FindAllStringSubmatch(string(readFile(t, f)), -1) {
			out[m[1]] = true
		}
	}
	if len(out) == 0 {
		t.Fatalf("no flags found in %v: has the flag registration style changed?", files)
	}
	return out
}

func checkFlags(t *testing.T, where string, flags map[string]string, defined map[string]bool) {
	t.Helper()
	for name := range flags {
		if !defined[name] {
			t.Errorf("%s passes -%s, which the command does not define", where, name)
		}
	}
}

var (
	runFlagFiles = []string{"../cmd/kandle/run.go", "../cmd/kandle/common.go"}
	genFlagFiles = []string{"../cmd/kandle/gencmd.go", "../internal/gen/flags.go"}
)

// engineMetrics greps the metric names engine/metrics.go and
// engine/health.go register and the series names they expose (histograms
// add _bucket, _sum and _count).
func engineMetrics(t *testing.T) (names []string, series map[string]string) {
	t.Helper()
	src := string(readFile(t, "../engine/metrics.go")) + string(readFile(t, "../engine/health.go")) + string(readFile(t, "../engine/revisions.go"))
	re := regexp.MustCompile(`prometheus\.(Counter|Gauge|Histogram|Summary)Opts\{Name:\s*"([a-z_:][a-z0-9_:]*)"`)
	series = map[string]string{}
	for _, m := range re.FindAllStringSubmatch(src, -1) {
		names = append(names, m[2])
		series[m[2]] = m[2]
		if m[1] == "Histogram" || m[1] == "Summary" {
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				series[m[2]+suf] = m[2]
			}
		}
	}
	if len(names) < 5 {
		t.Fatalf("found only %d metric names in engine/metrics.go: has the registration style changed?", len(names))
	}
	return names, series
}

var kandleSeries = regexp.MustCompile(`\bkandle_[a-z0-9_]+`)

// connectorMetric matches the metrics the sink connectors register under
// their own prefixes; cmd/kandle's TestDashboardAndAlertMetricsExist checks
// them (and every other name) against /metrics of a running kandle run.
var connectorMetric = regexp.MustCompile(`^kandle_(dynamodb|valkey|s3parquet)_`)

// checkMetrics reports series in expr that engine/metrics.go and
// engine/health.go do not register (connector metrics aside) and returns
// the engine metric names expr uses.
func checkMetrics(t *testing.T, where, expr string, series map[string]string) []string {
	t.Helper()
	var used []string
	for _, s := range kandleSeries.FindAllString(expr, -1) {
		if connectorMetric.MatchString(s) {
			continue
		}
		name, ok := series[s]
		if !ok {
			t.Errorf("%s uses %s, which engine/metrics.go does not register (expr %q)", where, s, expr)
			continue
		}
		used = append(used, name)
	}
	return used
}

func TestEveryFileParses(t *testing.T) {
	var n int
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && path == filepath.Join("helm", "kandle", "templates") {
			return fs.SkipDir // Helm templates: deploy/chartcheck renders and checks them
		}
		if err != nil || d.IsDir() {
			return err
		}
		switch filepath.Ext(path) {
		case ".yaml", ".yml":
			if len(yamlDocs(t, path)) == 0 {
				t.Errorf("%s: no YAML document", path)
			}
			n++
		case ".json":
			var v any
			if err := json.Unmarshal(readFile(t, path), &v); err != nil {
				t.Errorf("%s: %v", path, err)
			}
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"docker-compose.yaml", "topology.compose.yaml", "kubernetes/statefulset.yaml",
		"grafana/kandle-dashboard.json", "prometheus/alerts.yaml"} {
		if _, err := os.Stat(want); err != nil {
			t.Errorf("missing %s: %v", want, err)
		}
	}
	if n < 10 {
		t.Errorf("parsed %d YAML/JSON files, want at least 10", n)
	}
}

func TestComposeTopologyValidates(t *testing.T) {
	top, err := topology.Load("topology.compose.yaml", sinkRegistry())
	if err != nil {
		t.Fatalf("topology.compose.yaml: %v", err)
	}
	compose := yamlDocs(t, "docker-compose.yaml")[0]
	services := get(t, compose, "services").(map[string]any)
	// Every address in the topology must be a compose service.
	hostOf := func(addr string) string {
		addr = strings.TrimPrefix(strings.TrimPrefix(addr, "http://"), "https://")
		h, _, _ := strings.Cut(addr, ":")
		return h
	}
	var addrs []string
	addrs = append(addrs, top.Brokers...)
	for name, s := range top.Sinks {
		switch c := s.Config.(type) {
		case *dynamodb.Config:
			addrs = append(addrs, c.Endpoint)
		case *s3parquet.Config:
			addrs = append(addrs, c.Endpoint)
		case *valkey.Config:
			addrs = append(addrs, c.Addrs...)
		default:
			t.Errorf("sink %s: unexpected config %T", name, c)
		}
	}
	for _, a := range addrs {
		if _, ok := services[hostOf(a)]; !ok {
			t.Errorf("topology address %q is not a compose service", a)
		}
	}
	// The broker address is the one Redpanda advertises to containers.
	var advertised string
	for _, a := range strs(t, services, "redpanda", "command") {
		if v, ok := strings.CutPrefix(a, "--advertise-kafka-addr="); ok {
			advertised = v
		}
	}
	for _, b := range top.Brokers {
		if !strings.Contains(advertised, "://"+b) {
			t.Errorf("broker %s is not among Redpanda's advertised listeners %q", b, advertised)
		}
	}
	if !strings.Contains(advertised, "://localhost:9092") {
		t.Errorf("Redpanda should advertise localhost:9092 for the host, advertises %q", advertised)
	}
	if !strings.HasPrefix(top.Metrics, "0.0.0.0:") {
		t.Errorf("metrics %q: inside a container it must listen on 0.0.0.0", top.Metrics)
	}
}

func TestComposeKandleService(t *testing.T) {
	compose := yamlDocs(t, "docker-compose.yaml")[0]
	svc := get(t, compose, "services", "kandle")
	if got := str(t, svc, "build", "dockerfile"); got != "deploy/Dockerfile" {
		t.Errorf("kandle builds from %s, want deploy/Dockerfile", got)
	}
	cmd := strs(t, svc, "command")
	if cmd[0] != "run" {
		t.Fatalf("kandle service runs %q, want run", cmd)
	}
	flags := flagValues(t, cmd[1:])
	checkFlags(t, "compose kandle service", flags, definedFlags(t, runFlagFiles...))
	// The topology it reads is the one mounted from topology.compose.yaml.
	var mounted bool
	for _, v := range strs(t, svc, "volumes") {
		if strings.HasPrefix(v, "./topology.compose.yaml:"+flags["t"]+":") {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("no volume mounts ./topology.compose.yaml at -t %s", flags["t"])
	}
	txn := mustDuration(t, flags["transaction-timeout"])
	if grace := mustDuration(t, str(t, svc, "stop_grace_period")); grace <= txn {
		t.Errorf("stop_grace_period %v must exceed -transaction-timeout %v", grace, txn)
	}
	gen := strs(t, compose, "services", "gen", "command")
	if gen[0] != "gen" {
		t.Fatalf("gen service runs %q", gen)
	}
	checkFlags(t, "compose gen service", flagValues(t, gen[1:]), definedFlags(t, genFlagFiles...))

	// The Dockerfile's default command uses real flags too.
	m := regexp.MustCompile(`(?m)^CMD (\[.*\])$`).FindSubmatch(readFile(t, "Dockerfile"))
	if m == nil {
		t.Fatal("Dockerfile has no exec-form CMD")
	}
	var dcmd []string
	if err := json.Unmarshal(m[1], &dcmd); err != nil {
		t.Fatalf("Dockerfile CMD: %v", err)
	}
	checkFlags(t, "Dockerfile CMD", flagValues(t, dcmd[1:]), definedFlags(t, runFlagFiles...))
}

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("duration %q: %v", s, err)
	}
	return d
}

// k8s returns the Kubernetes objects under kubernetes/ by kind.
func k8s(t *testing.T) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, f := range files {
		for _, d := range yamlDocs(t, f) {
			kind, _ := d["kind"].(string)
			if kind == "" {
				t.Fatalf("%s: document without kind", f)
			}
			if _, dup := out[kind]; dup {
				t.Fatalf("two %s objects; the test expects one of each kind", kind)
			}
			out[kind] = d
		}
	}
	return out
}

func TestStatefulSet(t *testing.T) {
	objs := k8s(t)
	sts := objs["StatefulSet"]
	if sts == nil {
		t.Fatal("no StatefulSet under kubernetes/")
	}
	pod := get(t, sts, "spec", "template", "spec")
	c := get(t, pod, "containers", 0)
	args := strs(t, c, "args")
	if args[0] != "run" {
		t.Fatalf("container runs %q, want run", args)
	}
	flags := flagValues(t, args[1:])
	checkFlags(t, "StatefulSet", flags, definedFlags(t, runFlagFiles...))

	// -instance comes from the pod name, so a restarted pod fences its
	// previous incarnation.
	if flags["instance"] != "$(POD_NAME)" {
		t.Errorf("-instance is %q, want $(POD_NAME)", flags["instance"])
	}
	var fromPodName bool
	for _, e := range get(t, c, "env").([]any) {
		if str(t, e, "name") == "POD_NAME" {
			fromPodName = str(t, e, "valueFrom", "fieldRef", "fieldPath") == "metadata.name"
		}
	}
	if !fromPodName {
		t.Error("env POD_NAME must come from fieldRef metadata.name")
	}

	// SIGKILL must not interrupt the final commit.
	txn := mustDuration(t, flags["transaction-timeout"])
	grace, ok := get(t, pod, "terminationGracePeriodSeconds").(int)
	if !ok {
		t.Fatal("terminationGracePeriodSeconds is not an integer")
	}
	if time.Duration(grace)*time.Second <= txn {
		t.Errorf("terminationGracePeriodSeconds %d must exceed -transaction-timeout %v", grace, txn)
	}

	// The state dir is the pod's own PVC.
	claim := str(t, sts, "spec", "volumeClaimTemplates", 0, "metadata", "name")
	var stateMounted bool
	for _, m := range get(t, c, "volumeMounts").([]any) {
		if str(t, m, "name") == claim && str(t, m, "mountPath") == flags["state-dir"] {
			stateMounted = true
		}
	}
	if !stateMounted {
		t.Errorf("-state-dir %s is not the mount of volume claim %s", flags["state-dir"], claim)
	}

	// Probes on the metrics port, which listens beyond loopback.
	_, port, _ := strings.Cut(flags["metrics"], ":")
	if h, _, _ := strings.Cut(flags["metrics"], ":"); h != "0.0.0.0" && h != "" {
		t.Errorf("-metrics %s: the kubelet and Prometheus cannot reach a loopback address", flags["metrics"])
	}
	var containerPort string
	for _, p := range get(t, c, "ports").([]any) {
		if str(t, p, "name") == "metrics" {
			containerPort = strconv.Itoa(get(t, p, "containerPort").(int))
		}
	}
	if containerPort != port {
		t.Errorf("container port metrics is %q, -metrics listens on %q", containerPort, port)
	}
	// Readiness is /readyz (partitions restored, sinks reachable, lag low),
	// liveness /healthz (the loops turn): a pod whose store is down leaves
	// the Service but is not restarted.
	for _, pr := range []struct{ probe, path string }{{"readinessProbe", "/readyz"}, {"livenessProbe", "/healthz"}} {
		if p := str(t, c, pr.probe, "httpGet", "path"); p != pr.path {
			t.Errorf("%s path %s, want %s", pr.probe, p, pr.path)
		}
		if p := str(t, c, pr.probe, "httpGet", "port"); p != "metrics" {
			t.Errorf("%s port %s, want metrics", pr.probe, p)
		}
	}
	if cpu := str(t, c, "resources", "requests", "cpu"); cpu != "2" {
		t.Errorf("cpu request %s, want 2", cpu)
	}

	// The topology file -t names comes from the ConfigMap, which validates.
	cm := objs["ConfigMap"]
	var cmMounted bool
	for _, v := range get(t, pod, "volumes").([]any) {
		m, _ := v.(map[string]any)
		if _, ok := m["configMap"]; ok && str(t, v, "configMap", "name") == str(t, cm, "metadata", "name") {
			for _, vm := range get(t, c, "volumeMounts").([]any) {
				if str(t, vm, "name") == str(t, v, "name") && filepath.Join(str(t, vm, "mountPath"), "topology.yaml") == flags["t"] {
					cmMounted = true
				}
			}
		}
	}
	if !cmMounted {
		t.Errorf("-t %s is not topology.yaml of the mounted ConfigMap", flags["t"])
	}
	top, err := topology.Parse("kubernetes/configmap.yaml (topology.yaml)", []byte(str(t, cm, "data", "topology.yaml")), sinkRegistry())
	if err != nil {
		t.Fatalf("ConfigMap topology: %v", err)
	}
	if top.Brokers.Embedded() {
		t.Error("the ConfigMap topology uses the embedded broker; a consumer group of pods needs a real one")
	}

	// Headless Service with scrape annotations on the metrics port; the PDB
	// and the Service select the pods.
	svc := objs["Service"]
	if ip := str(t, svc, "spec", "clusterIP"); ip != "None" {
		t.Errorf("Service clusterIP %s, want None (headless)", ip)
	}
	if a := get(t, svc, "metadata", "annotations").(map[string]any); a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != port {
		t.Errorf("Service scrape annotations %v, want scrape true and port %s", a, port)
	}
	labels := get(t, sts, "spec", "template", "metadata", "labels").(map[string]any)
	for kind, sel := range map[string]any{
		"Service":             get(t, svc, "spec", "selector"),
		"PodDisruptionBudget": get(t, objs["PodDisruptionBudget"], "spec", "selector", "matchLabels"),
		"StatefulSet":         get(t, sts, "spec", "selector", "matchLabels"),
	} {
		for k, v := range sel.(map[string]any) {
			if labels[k] != v {
				t.Errorf("%s selects %s=%v, which the pod template does not carry", kind, k, v)
			}
		}
	}
	if str(t, sts, "spec", "serviceName") != str(t, svc, "metadata", "name") {
		t.Error("StatefulSet serviceName must be the headless Service")
	}
}

func TestKustomizationListsEveryManifest(t *testing.T) {
	kz := yamlDocs(t, "kubernetes/kustomization.yaml")[0]
	listed := strs(t, kz, "resources")
	files, _ := filepath.Glob("kubernetes/*.yaml")
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && !slices.Contains(listed, b) {
			t.Errorf("kustomization.yaml does not list %s", b)
		}
	}
	for _, r := range listed {
		if _, err := os.Stat(filepath.Join("kubernetes", r)); err != nil {
			t.Errorf("kustomization.yaml lists %s: %v", r, err)
		}
	}
}

// exprs collects every "expr" and variable "query" string in a dashboard.
func exprs(v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && (k == "expr" || k == "definition") {
				*out = append(*out, s)
			}
			exprs(e, out)
		}
	case []any:
		for _, e := range x {
			exprs(e, out)
		}
	}
}

func TestDashboardUsesRealMetrics(t *testing.T) {
	names, series := engineMetrics(t)
	var dash map[string]any
	if err := json.Unmarshal(readFile(t, "grafana/kandle-dashboard.json"), &dash); err != nil {
		t.Fatal(err)
	}
	var all []string
	exprs(dash, &all)
	used := map[string]bool{}
	for _, e := range all {
		for _, n := range checkMetrics(t, "dashboard", e, series) {
			used[n] = true
		}
	}
	// Every engine metric has a panel, so a new one cannot be forgotten.
	for _, n := range names {
		if !used[n] {
			t.Errorf("no dashboard panel uses %s (engine/metrics.go registers it)", n)
		}
	}
	ids := map[float64]bool{}
	var watermarkLag bool
	for _, p := range get(t, dash, "panels").([]any) {
		id := get(t, p, "id").(float64)
		if ids[id] {
			t.Errorf("duplicate panel id %v", id)
		}
		ids[id] = true
		get(t, p, "gridPos", "w")
		var pe []string
		exprs(p, &pe)
		for _, e := range pe {
			if strings.Contains(e, "time() -") && strings.Contains(e, "kandle_watermark_ms") && strings.Contains(e, "/ 1000") {
				watermarkLag = true
			}
		}
	}
	if !watermarkLag {
		t.Error("no panel shows watermark lag as time() - kandle_watermark_ms / 1000")
	}
}

// anchors returns the GitHub anchors of the headings of a Markdown file.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(string(readFile(t, path)), "\n") {
		h := strings.TrimLeft(line, "#")
		if h == line || !strings.HasPrefix(h, " ") {
			continue
		}
		a := drop.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), "")
		out[strings.ReplaceAll(a, " ", "-")] = true
	}
	return out
}

func TestAlerts(t *testing.T) {
	_, series := engineMetrics(t)
	docs := anchors(t, "../docs/operations.md")
	doc := yamlDocs(t, "prometheus/alerts.yaml")[0]
	var n int
	for _, g := range get(t, doc, "groups").([]any) {
		for _, r := range get(t, g, "rules").([]any) {
			name := str(t, r, "alert")
			n++
			if len(checkMetrics(t, "alert "+name, str(t, r, "expr"), series)) == 0 {
				t.Errorf("alert %s uses no kandle metric", name)
			}
			if s := str(t, r, "labels", "severity"); !slices.Contains([]string{"critical", "warning", "info"}, s) {
				t.Errorf("alert %s: severity %q", name, s)
			}
			str(t, r, "annotations", "summary")
			url := str(t, r, "annotations", "runbook_url")
			file, anchor, _ := strings.Cut(url, "#")
			if file != "docs/operations.md" || !docs[anchor] {
				t.Errorf("alert %s: runbook_url %s is not a heading of docs/operations.md", name, url)
			}
			if anchor != strings.ToLower(name) {
				t.Errorf("alert %s: runbook anchor %s, want #%s", name, anchor, strings.ToLower(name))
			}
		}
	}
	if n < 5 {
		t.Errorf("only %d alerts", n)
	}
}

// TestChartTopologiesValidate validates the topology of the Helm chart's
// default values and of every example values file with the real sink specs
// (deploy/chartcheck renders the chart; it parses only the graph), and
// checks that the flags the chart's templates pass to kandle exist.
func TestChartTopologiesValidate(t *testing.T) {
	files, err := filepath.Glob("helm/kandle/examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example values under helm/kandle/examples (%v)", err)
	}
	files = append([]string{"helm/kandle/values.yaml"}, files...)
	for _, f := range files {
		doc := yamlDocs(t, f)[0]
		src, ok := doc["topology"].(string)
		if !ok {
			if f == "helm/kandle/values.yaml" {
				t.Fatalf("%s: no topology string", f)
			}
			continue // an example that keeps the default topology
		}
		if _, err := topology.Parse(f+" (topology)", []byte(src), sinkRegistry()); err != nil {
			t.Errorf("%s: the topology does not validate:\n%v", f, err)
		}
	}
	defined := definedFlags(t, "../cmd/kandle/run.go", "../cmd/kandle/plan.go", "../cmd/kandle/serve.go", "../cmd/kandle/common.go")
	flagRE := regexp.MustCompile(`(?m)^\s*- -([a-z][a-z0-9-]*)=|\[plan, -([a-z-]+)`)
	templates, err := filepath.Glob("helm/kandle/templates/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range templates {
		for _, m := range flagRE.FindAllStringSubmatch(string(readFile(t, f)), -1) {
			name := m[1] + m[2]
			n++
			if !defined[name] {
				t.Errorf("%s passes -%s, which kandle does not define", f, name)
			}
		}
	}
	if n < 8 {
		t.Errorf("found only %d flags in the chart's templates: has their layout changed?", n)
	}
}
