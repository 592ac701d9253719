package chartcheck

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/kandle/kandle/topology"
)

const chartDir = "../helm/kandle"

// withCRDs are the capabilities of a cluster with the Prometheus Operator's
// and KEDA's CRDs installed.
func withCRDs() *chartutil.Capabilities {
	c := *chartutil.DefaultCapabilities
	c.APIVersions = append(slices.Clone(c.APIVersions),
		"monitoring.coreos.com/v1", "monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule",
		"keda.sh/v1alpha1", "keda.sh/v1alpha1/ScaledObject")
	return &c
}

// rendered is one object of a rendered chart, decoded into its API type.
type rendered struct {
	template string
	kind     string
	name     string
	obj      any
}

// objects of a rendered chart by kind and name.
type objects map[string]map[string]any

func (o objects) get(t *testing.T, kind, name string) any {
	t.Helper()
	v, ok := o[kind][name]
	if !ok {
		t.Fatalf("no %s %q rendered (have %v)", kind, name, o.names(kind))
	}
	return v
}

func (o objects) names(kind string) []string {
	var out []string
	for n := range o[kind] {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// newTyped returns a pointer to the Go type of apiVersion/kind; every kind
// the chart renders must be here, so a new template cannot skip the check.
func newTyped(apiVersion, kind string) (any, error) {
	switch apiVersion + "/" + kind {
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1/Service":
		return &corev1.Service{}, nil
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "apps/v1/StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}, nil
	case "batch/v1/Job":
		return &batchv1.Job{}, nil
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "autoscaling/v2/HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, nil
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, nil
	case "monitoring.coreos.com/v1/PrometheusRule":
		return &monitoringv1.PrometheusRule{}, nil
	case "keda.sh/v1alpha1/ScaledObject":
		return &kedav1alpha1.ScaledObject{}, nil
	}
	return nil, fmt.Errorf("no API type known for %s %s", apiVersion, kind)
}

// render renders the chart with the values file (none: the defaults) as
// `helm template` or `helm upgrade` would, and decodes every object strictly.
func render(t *testing.T, valuesFile string, caps *chartutil.Capabilities) ([]rendered, objects) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	vals := map[string]any{}
	if valuesFile != "" {
		if vals, err = chartutil.ReadValuesFile(valuesFile); err != nil {
			t.Fatalf("%s: %v", valuesFile, err)
		}
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "kandle", Namespace: "kandle", IsUpgrade: true}, caps)
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	var out []rendered
	objs := objects{}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range files {
			if !yield(n) {
				return
			}
		}
	})
	for _, file := range names {
		if strings.HasSuffix(file, "NOTES.txt") || strings.HasPrefix(filepath.Base(file), "_") {
			continue
		}
		for _, doc := range splitDocs(files[file]) {
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s: not YAML: %v\n%s", file, err, doc)
			}
			obj, err := newTyped(head.APIVersion, head.Kind)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			// UnmarshalStrict: unknown and duplicate fields are errors.
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Errorf("%s: %s %s does not match the API type: %v", file, head.Kind, head.Metadata.Name, err)
				continue
			}
			if head.Metadata.Name == "" {
				t.Errorf("%s: %s without a name", file, head.Kind)
			}
			if objs[head.Kind] == nil {
				objs[head.Kind] = map[string]any{}
			}
			if _, dup := objs[head.Kind][head.Metadata.Name]; dup {
				t.Errorf("%s: two %s named %s", file, head.Kind, head.Metadata.Name)
			}
			objs[head.Kind][head.Metadata.Name] = obj
			out = append(out, rendered{template: file, kind: head.Kind, name: head.Metadata.Name, obj: obj})
		}
	}
	return out, objs
}

// splitDocs splits a multi-document YAML file, dropping empty documents.
func splitDocs(s string) []string {
	var out []string
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(s, -1) {
		empty := true
		for _, l := range strings.Split(d, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				empty = false
				break
			}
		}
		if !empty {
			out = append(out, d)
		}
	}
	return out
}

// valuesFiles are the cases: the defaults without CRDs, the defaults and
// every example with them.
type valuesCase struct {
	name, file string
	caps       *chartutil.Capabilities
}

func valuesCases(t *testing.T) []valuesCase {
	t.Helper()
	cases := []valuesCase{
		{"defaults", "", chartutil.DefaultCapabilities},
		{"defaults-with-crds", "", withCRDs()},
	}
	examples, err := filepath.Glob(filepath.Join(chartDir, "examples", "*.yaml"))
	if err != nil || len(examples) < 4 {
		t.Fatalf("want the example values files under %s/examples (have %v, %v)", chartDir, examples, err)
	}
	for _, f := range examples {
		cases = append(cases, valuesCase{strings.TrimSuffix(filepath.Base(f), ".yaml"), f, withCRDs()})
	}
	return cases
}

func TestChartRendersStrictly(t *testing.T) {
	for _, c := range valuesCases(t) {
		t.Run(c.name, func(t *testing.T) {
			all, objs := render(t, c.file, c.caps)
			if t.Failed() {
				return
			}
			fullname := "kandle"
			sts := objs.get(t, "StatefulSet", fullname).(*appsv1.StatefulSet)
			top := checkStatefulSet(t, objs, sts)
			checkPodRefs(t, objs, "StatefulSet "+sts.Name, &sts.Spec.Template.Spec)
			checkService(t, objs, fullname, sts.Spec.Template.Labels, &sts.Spec.Template.Spec)

			pdb, hasPDB := objs["PodDisruptionBudget"][fullname]
			if !hasPDB {
				t.Error("no PodDisruptionBudget")
			} else if !selects(pdb.(*policyv1.PodDisruptionBudget).Spec.Selector.MatchLabels, sts.Spec.Template.Labels) {
				t.Error("the PodDisruptionBudget does not select the StatefulSet's pods")
			}
			checkPlanHook(t, objs)

			_, crds := objs["ServiceMonitor"]
			if want := c.caps.APIVersions.Has("monitoring.coreos.com/v1/ServiceMonitor"); crds != want {
				t.Errorf("ServiceMonitor rendered: %v, Prometheus Operator CRDs present: %v", crds, want)
			}
			if crds {
				checkMonitoring(t, objs, fullname)
			}
			if so, ok := objs["ScaledObject"][fullname]; ok {
				if sts.Spec.Replicas != nil {
					t.Error("with KEDA on the StatefulSet must not set replicas (every upgrade would reset the scale)")
				}
				checkScaledObject(t, so.(*kedav1alpha1.ScaledObject), sts, top)
			} else if sts.Spec.Replicas == nil {
				t.Error("without KEDA the StatefulSet must set replicas")
			}
			if d, ok := objs["Deployment"][fullname+"-serve"]; ok {
				dep := d.(*appsv1.Deployment)
				checkPodRefs(t, objs, "Deployment "+dep.Name, &dep.Spec.Template.Spec)
				checkService(t, objs, fullname+"-serve", dep.Spec.Template.Labels, &dep.Spec.Template.Spec)
				if selects(sts.Spec.Selector.MatchLabels, dep.Spec.Template.Labels) || selects(dep.Spec.Selector.MatchLabels, sts.Spec.Template.Labels) {
					t.Error("the serve Deployment's and the StatefulSet's selectors overlap")
				}
				if h, ok := objs["HorizontalPodAutoscaler"][fullname+"-serve"]; ok {
					ref := h.(*autoscalingv2.HorizontalPodAutoscaler).Spec.ScaleTargetRef
					if ref.Kind != "Deployment" || ref.Name != dep.Name {
						t.Errorf("the serve HPA targets %s %s", ref.Kind, ref.Name)
					}
				}
			}
			t.Logf("%d objects: %v", len(all), func() []string {
				var s []string
				for _, r := range all {
					s = append(s, r.kind+"/"+r.name)
				}
				return s
			}())
		})
	}
}

// flagArgs turns -name=value arguments into a map.
func flagArgs(t *testing.T, args []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !ok {
			v = "true"
		}
		out[k] = v
	}
	return out
}

// checkStatefulSet checks the processing group's pods and returns the
// topology they run (from the ConfigMap they mount).
func checkStatefulSet(t *testing.T, objs objects, sts *appsv1.StatefulSet) *topology.Topology {
	t.Helper()
	spec := &sts.Spec.Template.Spec
	if !selects(sts.Spec.Selector.MatchLabels, sts.Spec.Template.Labels) {
		t.Error("the StatefulSet's selector does not match its pod labels")
	}
	if _, ok := objs["Service"][sts.Spec.ServiceName]; !ok {
		t.Errorf("serviceName %q is not a rendered Service", sts.Spec.ServiceName)
	}
	if sts.Spec.Template.Annotations["checksum/topology"] == "" {
		t.Error("no checksum/topology annotation: a topology edit would not roll the pods")
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("want one container, have %d", len(spec.Containers))
	}
	c := spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "run" {
		t.Fatalf("the container runs %q, want kandle run", c.Args)
	}
	flags := flagArgs(t, c.Args[1:])
	if flags["instance"] != "$(POD_NAME)" {
		t.Errorf("-instance=%q, want $(POD_NAME): transactional ids and group instance ids come from the pod name", flags["instance"])
	}
	if !hasFieldEnv(c.Env, "POD_NAME", "metadata.name") {
		t.Error("POD_NAME is not the pod's metadata.name")
	}
	if flags["static-membership"] != "true" {
		t.Errorf("-static-membership=%q, want true", flags["static-membership"])
	}
	txn, err := time.ParseDuration(flags["transaction-timeout"])
	if err != nil {
		t.Fatalf("-transaction-timeout: %v", err)
	}
	sess, err := time.ParseDuration(flags["session-timeout"])
	if err != nil {
		t.Fatalf("-session-timeout: %v", err)
	}
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	if grace <= txn {
		t.Errorf("terminationGracePeriodSeconds %v is not longer than -transaction-timeout %v: SIGKILL would cut the last commit and sink flush short", grace, txn)
	}
	if sess < 30*time.Second {
		t.Errorf("-session-timeout %v is too short for a static member's restart (stop, reschedule, volume attach, start)", sess)
	}
	if flags["state-dir"] == "" || !mounted(c, flags["state-dir"], "state") {
		t.Errorf("-state-dir %q is not the state volume's mount", flags["state-dir"])
	}
	if sts.Spec.VolumeClaimTemplates == nil && volume(spec, "state") == nil {
		t.Error("no state volume")
	}
	port := containerPort(t, c, "metrics")
	if want := fmt.Sprintf("0.0.0.0:%d", port); flags["metrics"] != want {
		t.Errorf("-metrics=%q, want %s (the metrics container port)", flags["metrics"], want)
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", name)
			continue
		}
		if probePort(t, c, p.HTTPGet.Port) != port {
			t.Errorf("%s probe on port %v, the metrics endpoint (with the probes) is on %d", name, p.HTTPGet.Port.String(), port)
		}
	}
	if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe path %q, want /readyz", c.ReadinessProbe.HTTPGet.Path)
	}
	if c.LivenessProbe != nil && c.LivenessProbe.HTTPGet != nil && c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe path %q, want /healthz (readiness drops during restores; liveness must not)", c.LivenessProbe.HTTPGet.Path)
	}
	if len(spec.TopologySpreadConstraints) == 0 {
		t.Error("no topology spread constraints")
	}
	for _, tsc := range spec.TopologySpreadConstraints {
		if tsc.LabelSelector == nil || !selects(tsc.LabelSelector.MatchLabels, sts.Spec.Template.Labels) {
			t.Errorf("topology spread on %s does not select the pods", tsc.TopologyKey)
		}
	}
	top := topologyOf(t, objs, spec, c, flags["t"])
	// Files the topology names (TLS, password) must be mounted.
	for _, f := range []string{top.Kafka.TLS.CAFile, top.Kafka.TLS.CertFile, top.Kafka.TLS.KeyFile, top.Kafka.SASL.PasswordFile} {
		if f == "" {
			continue
		}
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return strings.HasPrefix(f, m.MountPath+"/") }) {
			t.Errorf("the topology reads %s, which is on no volume the container mounts (extraVolumes/extraVolumeMounts)", f)
		}
	}
	return top
}

// topologyOf parses the topology file the container reads from the
// ConfigMap mounted at its directory.
func topologyOf(t *testing.T, objs objects, spec *corev1.PodSpec, c corev1.Container, path string) *topology.Topology {
	t.Helper()
	dir, file := filepath.Dir(path), filepath.Base(path)
	for _, m := range c.VolumeMounts {
		if m.MountPath != dir {
			continue
		}
		v := volume(spec, m.Name)
		if v == nil || v.ConfigMap == nil {
			t.Fatalf("%s is not mounted from a ConfigMap", dir)
		}
		cm := objs.get(t, "ConfigMap", v.ConfigMap.Name).(*corev1.ConfigMap)
		data, ok := cm.Data[file]
		if !ok {
			t.Fatalf("ConfigMap %s has no %s", cm.Name, file)
		}
		graph, reg := graphOnly(t, []byte(data))
		top, err := topology.Parse(path, graph, reg)
		if err != nil {
			t.Fatalf("the topology in ConfigMap %s: %v", cm.Name, err)
		}
		return top
	}
	t.Fatalf("nothing mounted at %s", dir)
	return nil
}

// graphOnly reduces a topology to its graph (sources, processors, sinks
// with kind and from) and registers the sink kinds it names with no
// settings: the sinks' own settings are validated with the real connector
// specs by deploy/deploy_test.go in kandle's module; here only who reads
// what matters.
func graphOnly(t *testing.T, data []byte) ([]byte, topology.Registry) {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	reg := topology.Registry{Sinks: map[string]topology.SinkKind{}}
	out := map[string]any{}
	for _, k := range []string{"name", "group", "brokers", "kafka", "sources", "processors", "dead_letter"} {
		if v, ok := doc[k]; ok {
			out[k] = v
		}
	}
	if sinks, ok := doc["sinks"].(map[string]any); ok {
		reduced := map[string]any{}
		for name, v := range sinks {
			s, _ := v.(map[string]any)
			kind, _ := s["kind"].(string)
			reduced[name] = map[string]any{"kind": kind, "from": s["from"]}
			reg.Sinks[kind] = topology.SinkKind{Name: kind, New: func() any { return &struct{}{} }}
		}
		out["sinks"] = reduced
	}
	b, err := yaml.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return b, reg
}

func hasFieldEnv(env []corev1.EnvVar, name, field string) bool {
	for _, e := range env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == field {
			return true
		}
	}
	return false
}

func mounted(c corev1.Container, path, volume string) bool {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path && m.Name == volume {
			return true
		}
	}
	return false
}

func volume(spec *corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

func containerPort(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %s", c.Name, name)
	return 0
}

// probePort resolves a named or numbered port of the container.
func probePort(t *testing.T, c corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntVal
	}
	return containerPort(t, c, p.StrVal)
}

// selects reports whether every label of sel is on labels.
func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// checkPodRefs checks that what a pod names exists: volumes of mounts,
// ConfigMaps of volumes, the ServiceAccount.
func checkPodRefs(t *testing.T, objs objects, what string, spec *corev1.PodSpec) {
	t.Helper()
	for _, c := range spec.Containers {
		for _, m := range c.VolumeMounts {
			if volume(spec, m.Name) == nil && m.Name != "state" {
				t.Errorf("%s: container %s mounts volume %s, which the pod does not have", what, c.Name, m.Name)
			}
		}
	}
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil {
			if _, ok := objs["ConfigMap"][v.ConfigMap.Name]; !ok {
				t.Errorf("%s: volume %s names ConfigMap %s, which is not rendered", what, v.Name, v.ConfigMap.Name)
			}
		}
	}
	if sa := spec.ServiceAccountName; sa != "" && sa != "default" {
		if _, ok := objs["ServiceAccount"][sa]; !ok {
			t.Errorf("%s: ServiceAccount %s is not rendered", what, sa)
		}
	}
}

// checkService checks that the Service named name selects the pods and
// targets a port their container has.
func checkService(t *testing.T, objs objects, name string, podLabels map[string]string, spec *corev1.PodSpec) {
	t.Helper()
	svc := objs.get(t, "Service", name).(*corev1.Service)
	if !selects(svc.Spec.Selector, podLabels) {
		t.Errorf("Service %s does not select its pods", name)
	}
	for _, p := range svc.Spec.Ports {
		probePort(t, spec.Containers[0], p.TargetPort)
	}
}

// checkPlanHook checks the pre-upgrade `kandle plan -check` Job.
func checkPlanHook(t *testing.T, objs objects) {
	t.Helper()
	j, ok := objs["Job"]["kandle-plan"]
	if !ok {
		t.Error("no kandle-plan Job")
		return
	}
	job := j.(*batchv1.Job)
	if job.Annotations["helm.sh/hook"] != "pre-upgrade" {
		t.Errorf("the plan Job's hook is %q, want pre-upgrade", job.Annotations["helm.sh/hook"])
	}
	cm := objs.get(t, "ConfigMap", "kandle-plan").(*corev1.ConfigMap)
	if w, _ := strconv.Atoi(cm.Annotations["helm.sh/hook-weight"]); cm.Annotations["helm.sh/hook"] != "pre-upgrade" || w >= func() int { v, _ := strconv.Atoi(job.Annotations["helm.sh/hook-weight"]); return v }() {
		t.Error("the plan ConfigMap must be a pre-upgrade hook created before the Job")
	}
	c := job.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "plan") || !slices.Contains(c.Args, "-check") {
		t.Errorf("the plan Job runs %q, want kandle plan -check", c.Args)
	}
	if cm.Data["topology.yaml"] != objs.get(t, "ConfigMap", "kandle-topology").(*corev1.ConfigMap).Data["topology.yaml"] {
		t.Error("the plan Job checks another topology than the one the release installs")
	}
	checkPodRefs(t, objs, "Job kandle-plan", &job.Spec.Template.Spec)
}

func checkMonitoring(t *testing.T, objs objects, fullname string) {
	t.Helper()
	sm := objs.get(t, "ServiceMonitor", fullname).(*monitoringv1.ServiceMonitor)
	svc := objs.get(t, "Service", fullname).(*corev1.Service)
	if !selects(sm.Spec.Selector.MatchLabels, svc.Labels) {
		t.Error("the ServiceMonitor does not select the Service")
	}
	for _, ep := range sm.Spec.Endpoints {
		if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
			t.Errorf("the ServiceMonitor scrapes port %q, which the Service lacks", ep.Port)
		}
	}
	pr := objs.get(t, "PrometheusRule", fullname).(*monitoringv1.PrometheusRule)
	n := 0
	for _, g := range pr.Spec.Groups {
		n += len(g.Rules)
	}
	raw, err := os.ReadFile("../prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Count(string(raw), "- alert: "); n != want {
		t.Errorf("the PrometheusRule has %d rules, deploy/prometheus/alerts.yaml %d", n, want)
	}
	cm := objs.get(t, "ConfigMap", fullname+"-dashboard").(*corev1.ConfigMap)
	dash, err := os.ReadFile("../grafana/kandle-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace([]byte(cm.Data["kandle-dashboard.json"])), bytes.TrimSpace(dash)) {
		t.Error("the dashboard ConfigMap is not deploy/grafana/kandle-dashboard.json")
	}
}

// groupInput is a consumer group with a topic it reads.
type groupInput struct{ group, topic string }

// consumerGroups lists the Kafka consumer groups of a topology as the
// engine names them (engine/graph.go: <group>.<processor> reading the
// stage's input; <group>.sink.<sink> reading each topic the sink takes),
// and the Kinesis streams its candles processors read.
func consumerGroups(top *topology.Topology) (groups []groupInput, streams []string) {
	for _, st := range top.Stages() {
		switch {
		case st.Source != nil && st.Source.IsKinesis():
			streams = append(streams, st.Source.Kinesis.Stream)
		case st.Source != nil:
			groups = append(groups, groupInput{top.Group + "." + st.Name, st.Source.Topic})
		default:
			groups = append(groups, groupInput{top.Group + "." + st.Name, st.Upstream.Output.Topic})
		}
	}
	for name, sk := range top.Sinks {
		for _, from := range sk.From {
			if p := top.Processors[from]; p != nil {
				groups = append(groups, groupInput{top.Group + ".sink." + name, p.Output.Topic})
			} else if s := top.Sources[from]; s != nil && !s.IsKinesis() {
				groups = append(groups, groupInput{top.Group + ".sink." + name, s.Topic})
			}
		}
	}
	return groups, streams
}

func checkScaledObject(t *testing.T, so *kedav1alpha1.ScaledObject, sts *appsv1.StatefulSet, top *topology.Topology) {
	t.Helper()
	ref := so.Spec.ScaleTargetRef
	if ref == nil || ref.Kind != "StatefulSet" || ref.Name != sts.Name || ref.APIVersion != "apps/v1" {
		t.Fatalf("the ScaledObject scales %+v, want the StatefulSet %s", ref, sts.Name)
	}
	wantGroups, wantStreams := consumerGroups(top)
	var gotGroups []groupInput
	var gotStreams []string
	maxParts := 0
	for _, g := range wantGroups {
		maxParts = max(maxParts, partitionsOf(top, g.topic))
	}
	for _, tr := range so.Spec.Triggers {
		switch tr.Type {
		case "kafka":
			gotGroups = append(gotGroups, groupInput{tr.Metadata["consumerGroup"], tr.Metadata["topic"]})
			if tr.Metadata["bootstrapServers"] == "" || tr.Metadata["lagThreshold"] == "" {
				t.Errorf("trigger %s lacks bootstrapServers or lagThreshold", tr.Name)
			}
		case "aws-kinesis-stream":
			gotStreams = append(gotStreams, tr.Metadata["streamName"])
		default:
			t.Errorf("unexpected trigger type %s", tr.Type)
		}
	}
	cmp := func(a, b groupInput) int { return strings.Compare(a.group+"/"+a.topic, b.group+"/"+b.topic) }
	slices.SortFunc(wantGroups, cmp)
	slices.SortFunc(gotGroups, cmp)
	if !slices.Equal(wantGroups, gotGroups) {
		t.Errorf("KEDA triggers on groups %v; the StatefulSet's topology runs %v", gotGroups, wantGroups)
	}
	slices.Sort(wantStreams)
	slices.Sort(gotStreams)
	if !slices.Equal(wantStreams, gotStreams) {
		t.Errorf("KEDA triggers on Kinesis streams %v; the topology reads %v", gotStreams, wantStreams)
	}
	if so.Spec.MaxReplicaCount == nil || int(*so.Spec.MaxReplicaCount) > max(maxParts, 1) {
		t.Errorf("maxReplicaCount %v exceeds the most partitions a group reads (%d): the extra pods would own nothing", so.Spec.MaxReplicaCount, maxParts)
	}
	adv := so.Spec.Advanced
	if adv == nil || adv.HorizontalPodAutoscalerConfig == nil || adv.HorizontalPodAutoscalerConfig.Behavior == nil ||
		adv.HorizontalPodAutoscalerConfig.Behavior.ScaleDown == nil || adv.HorizontalPodAutoscalerConfig.Behavior.ScaleDown.StabilizationWindowSeconds == nil ||
		*adv.HorizontalPodAutoscalerConfig.Behavior.ScaleDown.StabilizationWindowSeconds < 600 {
		t.Error("want a scale-down stabilisation window of at least 10 minutes")
	}
}

// partitionsOf is the partition count kandle creates topic with.
func partitionsOf(top *topology.Topology, topic string) int {
	for _, s := range top.Sources {
		if s.Topic == topic {
			return s.Partitions
		}
	}
	for _, p := range top.Processors {
		if p.Output.Topic == topic {
			return p.Output.Partitions
		}
	}
	return 0
}

// TestKEDAOffByDefault: autoscaling is opt-in.
func TestKEDAOffByDefault(t *testing.T) {
	_, objs := render(t, "", withCRDs())
	if len(objs["ScaledObject"]) != 0 {
		t.Error("a ScaledObject is rendered with the default values; keda.enabled must turn it on")
	}
}
