package deploy

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/deploy/image"
	"github.com/agentbus/agentbus/test/testkit"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

var chartDir = filepath.Join(repoRoot, "deploy", "helm", "agentbus")

// manifests are the objects a rendering of the chart made, decoded.
type manifests struct {
	deployment      *appsv1.Deployment
	configMaps      []*corev1.ConfigMap
	services        []*corev1.Service
	pdb             *policyv1.PodDisruptionBudget
	serviceMonitors []*serviceMonitor
}

// serviceMonitor is the part of the Prometheus Operator's
// monitoring.coreos.com/v1 ServiceMonitor the chart writes. k8s.io/api
// has no such type: decoding into this one strictly fails on any field
// it does not know, a misspelt one too.
type serviceMonitor struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		JobLabel          string               `json:"jobLabel,omitempty"`
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector *struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector,omitempty"`
		Endpoints []struct {
			Port          string `json:"port,omitempty"`
			Path          string `json:"path,omitempty"`
			Scheme        string `json:"scheme,omitempty"`
			Interval      string `json:"interval,omitempty"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// render renders the chart with helm's engine (strict: a template using a
// value that does not exist fails; values.schema.json refuses a value it
// does not name) for the values in valuesFile (none:
// the chart's defaults) and overrides, as a release "agentbus" would be
// installed.
func render(t *testing.T, valuesFile string, overrides map[string]any) (map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{}
	if valuesFile != "" {
		raw, err := os.ReadFile(valuesFile)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, &vals); err != nil {
			t.Fatal(err)
		}
	}
	vals = chartutil.CoalesceTables(overrides, vals)
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "agentbus", Namespace: "agents", IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Engine{Strict: true}.Render(ch, rv)
}

// decode splits the rendered files into objects and decodes each strictly
// into its k8s.io/api type: an unknown or duplicated field fails t.
func decode(t *testing.T, files map[string]string) manifests {
	t.Helper()
	var m manifests
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") || strings.HasPrefix(path.Base(name), "_") {
			continue
		}
		for _, doc := range releaseutil.SplitManifests(files[name]) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			strict := func(into any) {
				if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
					t.Fatalf("%s: %s/%s does not decode strictly: %v\n%s", name, tm.APIVersion, tm.Kind, err, doc)
				}
			}
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 Deployment":
				if m.deployment != nil {
					t.Fatalf("%s: a second Deployment", name)
				}
				m.deployment = &appsv1.Deployment{}
				strict(m.deployment)
			case "v1 ConfigMap":
				cm := &corev1.ConfigMap{}
				strict(cm)
				m.configMaps = append(m.configMaps, cm)
			case "v1 Service":
				s := &corev1.Service{}
				strict(s)
				m.services = append(m.services, s)
			case "policy/v1 PodDisruptionBudget":
				m.pdb = &policyv1.PodDisruptionBudget{}
				strict(m.pdb)
			case "monitoring.coreos.com/v1 ServiceMonitor":
				sm := &serviceMonitor{}
				strict(sm)
				m.serviceMonitors = append(m.serviceMonitors, sm)
			default:
				t.Fatalf("%s: unexpected object %s %s", name, tm.APIVersion, tm.Kind)
			}
		}
	}
	if m.deployment == nil {
		t.Fatal("the chart renders no Deployment")
	}
	return m
}

// TestChartDefaults renders the chart with its default values and checks
// the Deployment, its probes, flags, environment and configuration
// against the agentbus binary built from this tree.
func TestChartDefaults(t *testing.T) {
	files, err := render(t, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, files)
	_, c := checkChart(t, m)
	if len(m.serviceMonitors) != 0 {
		t.Error("a ServiceMonitor by default: the Prometheus Operator's CRD may not be installed")
	}
	if _, vol := dataVolume(t, m.deployment.Spec.Template.Spec, c); vol.EmptyDir == nil || vol.EmptyDir.SizeLimit == nil || vol.EmptyDir.SizeLimit.String() != "8Gi" {
		t.Errorf("the data volume by default: %+v, want an emptyDir of at most 8Gi", vol.VolumeSource)
	}
}

// TestChartDataVolume: data.sizeLimit bounds the data directory's
// emptyDir; data.volume replaces the emptyDir with a volume of one's own.
func TestChartDataVolume(t *testing.T) {
	for _, c := range []struct {
		name  string
		data  map[string]any
		check func(*corev1.Volume) bool
	}{
		{"sizeLimit", map[string]any{"sizeLimit": "20Gi"}, func(v *corev1.Volume) bool {
			return v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil && v.EmptyDir.SizeLimit.String() == "20Gi"
		}},
		{"volume", map[string]any{"volume": map[string]any{"ephemeral": map[string]any{"volumeClaimTemplate": map[string]any{"spec": map[string]any{
			"accessModes": []any{"ReadWriteOnce"}, "storageClassName": "fast-ssd", "resources": map[string]any{"requests": map[string]any{"storage": "20Gi"}},
		}}}}}, func(v *corev1.Volume) bool {
			return v.EmptyDir == nil && v.Ephemeral != nil && v.Ephemeral.VolumeClaimTemplate != nil &&
				*v.Ephemeral.VolumeClaimTemplate.Spec.StorageClassName == "fast-ssd"
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			files, err := render(t, "", map[string]any{"data": c.data})
			if err != nil {
				t.Fatal(err)
			}
			m := decode(t, files)
			_, ctr := checkChart(t, m)
			if _, vol := dataVolume(t, m.deployment.Spec.Template.Spec, ctr); !c.check(vol) {
				t.Errorf("data %v: the data volume is %+v", c.data, vol.VolumeSource)
			}
		})
	}
}

// TestChartProduction renders the chart with ci/production-values.yaml:
// three replicas, NATS credentials and TLS and the webhook secrets' key
// from Secrets, a ServiceMonitor.
func TestChartProduction(t *testing.T) {
	files, err := render(t, filepath.Join(chartDir, "ci", "production-values.yaml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, files)
	cfg, _ := checkChart(t, m)
	if got := *m.deployment.Spec.Replicas; got != 3 {
		t.Errorf("replicas %d, want 3", got)
	}
	if cfg.NATS.Creds == "" || cfg.NATS.TLS.CA == "" || cfg.NATS.TLS.Cert == "" || cfg.NATS.TLS.Key == "" {
		t.Errorf("nats.creds and nats.tls are not set from the Secrets: %+v", cfg.NATS)
	}
	c := m.deployment.Spec.Template.Spec.Containers[0]
	if e := envVar(c, "AGENTBUS_WEBHOOK_SECRET_KEY"); e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
		e.ValueFrom.SecretKeyRef.Name != "agentbus-webhook-key" || e.ValueFrom.SecretKeyRef.Key != "secretKey" {
		t.Errorf("AGENTBUS_WEBHOOK_SECRET_KEY is not read from the Secret agentbus-webhook-key: %+v", e)
	}
	if len(m.serviceMonitors) != 1 {
		t.Fatalf("%d ServiceMonitors, want 1", len(m.serviceMonitors))
	}
	sm := m.serviceMonitors[0]
	if sm.Metadata.Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels %v: serviceMonitor.labels not applied", sm.Metadata.Labels)
	}
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	var scraped []*corev1.Service
	for _, s := range m.services {
		if sel.Matches(labels.Set(s.Labels)) {
			scraped = append(scraped, s)
		}
	}
	if len(scraped) != 1 {
		t.Fatalf("the ServiceMonitor selects %d Services, want the ops one", len(scraped))
	}
	for _, ep := range sm.Spec.Endpoints {
		sp := servicePort(scraped[0], ep.Port)
		if sp == nil {
			t.Errorf("ServiceMonitor endpoint port %q: no such port on Service %s", ep.Port, scraped[0].Name)
			continue
		}
		if got := containerPort(t, c, sp.TargetPort.String()); got.Name != "ops" {
			t.Errorf("ServiceMonitor scrapes container port %q, want ops", got.Name)
		}
		if ep.Path != "/metrics" {
			t.Errorf("ServiceMonitor path %q, want /metrics", ep.Path)
		}
	}
}

// TestChartRefuses checks the chart stops a rendering that would run
// agentbus wrongly, or with a value it would not read, naming the value.
func TestChartRefuses(t *testing.T) {
	for _, c := range []struct {
		name     string
		override map[string]any
		want     string
	}{
		{"one replica", map[string]any{"replicaCount": 1}, "replicaCount"},
		{"a misspelt value", map[string]any{"secrets": map[string]any{"natsCred": map[string]any{"name": "x"}}}, "natsCred"},
		{"embedded NATS", map[string]any{"config": map[string]any{"nats": map[string]any{"url": ""}}}, "config.nats.url is required"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := render(t, "", c.override)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("render: %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// checkChart checks what every rendering must hold, and returns the
// configuration the container loads and its container.
func checkChart(t *testing.T, m manifests) (settings.Config, corev1.Container) {
	d := m.deployment
	pod := d.Spec.Template.Spec
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("replicas %v, want at least 2", d.Spec.Replicas)
	}
	podSel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	podLabels := labels.Set(d.Spec.Template.Labels)
	if !podSel.Matches(podLabels) {
		t.Errorf("the Deployment's selector %v does not match its pods' labels %v", d.Spec.Selector, podLabels)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]

	// Non-root, read-only root filesystem, no privilege.
	psc, csc := pod.SecurityContext, c.SecurityContext
	if psc == nil || csc == nil {
		t.Fatal("no security context")
	}
	if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("runAsNonRoot is not set")
	}
	if psc.RunAsUser == nil || *psc.RunAsUser != image.UID || psc.RunAsGroup == nil || *psc.RunAsGroup != image.GID {
		t.Errorf("runAsUser/runAsGroup %v/%v, want the image's %d:%d", psc.RunAsUser, psc.RunAsGroup, image.UID, image.GID)
	}
	if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not set")
	}
	if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") {
		t.Error("capabilities are not all dropped")
	}
	// With the root filesystem read-only, the data directory is a
	// writable volume: agentbus keeps its read models in <data>/index and
	// does not start without them.
	dataVolume(t, pod, c)
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}

	// The command: the image's entrypoint (agentbus) with these
	// arguments; serve's flags are the binary's.
	if len(c.Command) != 0 {
		t.Errorf("command %q replaces the image's entrypoint", c.Command)
	}
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("args %q, want serve first", c.Args)
	}
	help := serveHelp(t)
	configPath := ""
	for i := 1; i < len(c.Args); i++ {
		a := c.Args[i]
		if !strings.HasPrefix(a, "-") {
			t.Errorf("args %q: %q is not a flag", c.Args, a)
			continue
		}
		flagName, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !regexp.MustCompile(`(?m)^\s+-` + regexp.QuoteMeta(flagName) + `\b`).MatchString(help) {
			t.Errorf("args: agentbus serve has no flag --%s", flagName)
		}
		if !hasVal && i+1 < len(c.Args) {
			i++
			val = c.Args[i]
		}
		if flagName == "config" {
			configPath = val
		}
	}
	known := knownEnv(t, help)
	for _, e := range c.Env {
		if !strings.HasPrefix(e.Name, "AGENTBUS_") {
			continue
		}
		if !known[e.Name] {
			if e.Name == "AGENTBUS_OPS_LISTEN" && !hasOpsListener(t) {
				t.Logf("env %s: this binary has no operations listener yet; the variable is not checked", e.Name)
				continue
			}
			t.Errorf("env %s: the agentbus binary reads no such variable", e.Name)
		}
	}

	// The configuration file: mounted from the ConfigMap, loaded and
	// validated by agentbus's own config package, its files mounted.
	if configPath == "" {
		t.Fatal("no --config")
	}
	raw, mount := mountedFile(t, m, pod, c, configPath)
	if mount == nil {
		t.Fatalf("--config %s is not mounted from the ConfigMap", configPath)
	}
	file := filepath.Join(t.TempDir(), "agentbus.yaml")
	if err := os.WriteFile(file, []byte(raw), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := settings.Default()
	if err := cfg.LoadFile(file); err != nil {
		t.Fatalf("the ConfigMap's agentbus.yaml: %v\n%s", err, raw)
	}
	if v := envValue(c, "AGENTBUS_LISTEN"); v != "" {
		cfg.Listen = v
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the ConfigMap's agentbus.yaml with the container's environment: %v", err)
	}
	if cfg.NATS.URL == "" {
		t.Error("nats.url is empty: each replica would run its own embedded server")
	}
	for key, p := range map[string]string{"nats.creds": cfg.NATS.Creds, "nats.tls.ca": cfg.NATS.TLS.CA, "nats.tls.cert": cfg.NATS.TLS.Cert, "nats.tls.key": cfg.NATS.TLS.Key} {
		if p == "" {
			continue
		}
		if _, v := mountedSecret(pod, c, p); v == nil {
			t.Errorf("%s %s is not a file of a mounted Secret", key, p)
		}
	}

	// Ports and probes: the API on http, /healthz and /readyz on ops,
	// each port the one agentbus listens on.
	httpPort, opsPort := containerPort(t, c, "http"), containerPort(t, c, "ops")
	if got := listenPort(t, cfg.Listen); got != httpPort.ContainerPort {
		t.Errorf("agentbus listens on %s, the http port is %d", cfg.Listen, httpPort.ContainerPort)
	}
	if v := envValue(c, "AGENTBUS_OPS_LISTEN"); v == "" || listenPort(t, v) != opsPort.ContainerPort {
		t.Errorf("AGENTBUS_OPS_LISTEN %q does not listen on the ops port %d", v, opsPort.ContainerPort)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"startup", c.StartupProbe, "/healthz"}, {"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s probe: none, or not HTTP", p.name)
			continue
		}
		if got := containerPort(t, c, p.probe.HTTPGet.Port.String()); got.Name != "ops" {
			t.Errorf("%s probe on port %s, want ops", p.name, p.probe.HTTPGet.Port.String())
		}
		if p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s probe path %q, want %s", p.name, p.probe.HTTPGet.Path, p.path)
		}
	}

	// Stopping: Kubernetes waits longer than agentbus's graceful stop
	// plus the pre-stop pause before it kills.
	grace := int64(30)
	if pod.TerminationGracePeriodSeconds != nil {
		grace = *pod.TerminationGracePeriodSeconds
	}
	var pause int64
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		pause = c.Lifecycle.PreStop.Sleep.Seconds
	}
	if need := pause + int64(cfg.ShutdownTimeout.D()/time.Second); grace <= need {
		t.Errorf("terminationGracePeriodSeconds %d: want above preStop %ds + shutdownTimeout %s", grace, pause, cfg.ShutdownTimeout.D())
	}

	// The Service reaches the http port; the PodDisruptionBudget keeps a
	// replica through a drain.
	var api *corev1.Service
	for _, s := range m.services {
		sel := labels.SelectorFromSet(s.Spec.Selector)
		if len(s.Spec.Selector) == 0 || !sel.Matches(podLabels) {
			t.Errorf("Service %s does not select the pods", s.Name)
		}
		if servicePort(s, "http") != nil {
			api = s
		}
	}
	if api == nil {
		t.Fatal("no Service with an http port")
	}
	if got := containerPort(t, c, servicePort(api, "http").TargetPort.String()); got.Name != "http" {
		t.Errorf("the Service sends to port %q, want http", got.Name)
	}
	if m.pdb == nil {
		t.Fatal("no PodDisruptionBudget")
	}
	if s, err := metav1.LabelSelectorAsSelector(m.pdb.Spec.Selector); err != nil || !s.Matches(podLabels) {
		t.Errorf("the PodDisruptionBudget does not select the pods: %v", err)
	}
	if mi := m.pdb.Spec.MinAvailable; mi == nil || mi.IntValue() < 1 || int32(mi.IntValue()) >= *d.Spec.Replicas {
		t.Errorf("PodDisruptionBudget minAvailable %v: want 1 to replicas-1 (%d)", mi, *d.Spec.Replicas-1)
	}
	return cfg, c
}

// knownEnv returns the AGENTBUS_* variables the binary reads: those serve
// -h names, and those the binary holds as strings (read from the
// environment only, as AGENTBUS_WEBHOOK_SECRET_KEY).
func knownEnv(t *testing.T, help string) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	for _, v := range regexp.MustCompile(`AGENTBUS_[A-Z_]+`).FindAllString(help, -1) {
		known[v] = true
	}
	bin, err := os.ReadFile(testkit.BuildAgentbus(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range regexp.MustCompile(`AGENTBUS_[A-Z_]*[A-Z]`).FindAll(bin, -1) {
		known[string(v)] = true
	}
	return known
}

func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func envValue(c corev1.Container, name string) string {
	if e := envVar(c, name); e != nil {
		return e.Value
	}
	return ""
}

// containerPort returns c's port named (or numbered) ref; it fails t when
// there is none.
func containerPort(t *testing.T, c corev1.Container, ref string) corev1.ContainerPort {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == ref || strconv.Itoa(int(p.ContainerPort)) == ref {
			return p
		}
	}
	t.Fatalf("container %s has no port %q", c.Name, ref)
	return corev1.ContainerPort{}
}

func servicePort(s *corev1.Service, name string) *corev1.ServicePort {
	for i := range s.Spec.Ports {
		if s.Spec.Ports[i].Name == name {
			return &s.Spec.Ports[i]
		}
	}
	return nil
}

func listenPort(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Fatalf("listen address %q is not host:port", addr)
	}
	return int32(n)
}

// mountedFile returns the content of the file at p in container c when a
// ConfigMap volume provides it.
func mountedFile(t *testing.T, m manifests, pod corev1.PodSpec, c corev1.Container, p string) (string, *corev1.VolumeMount) {
	t.Helper()
	for i, vm := range c.VolumeMounts {
		vol := volume(pod, vm.Name)
		if vol == nil || vol.ConfigMap == nil {
			continue
		}
		key := ""
		switch {
		case vm.SubPath != "" && vm.MountPath == p:
			key = vm.SubPath
		case vm.SubPath == "" && path.Dir(p) == path.Clean(vm.MountPath):
			key = path.Base(p)
		default:
			continue
		}
		for _, cm := range m.configMaps {
			if cm.Name == vol.ConfigMap.Name {
				if data, ok := cm.Data[key]; ok {
					return data, &c.VolumeMounts[i]
				}
			}
		}
	}
	return "", nil
}

// mountedSecret returns the Secret volume and its item that provide the
// file at p in container c.
func mountedSecret(pod corev1.PodSpec, c corev1.Container, p string) (*corev1.Volume, *corev1.VolumeMount) {
	for i, vm := range c.VolumeMounts {
		vol := volume(pod, vm.Name)
		if vol == nil || vol.Secret == nil || path.Dir(p) != path.Clean(vm.MountPath) {
			continue
		}
		if len(vol.Secret.Items) == 0 {
			return vol, &c.VolumeMounts[i]
		}
		for _, it := range vol.Secret.Items {
			if it.Path == path.Base(p) {
				return vol, &c.VolumeMounts[i]
			}
		}
	}
	return nil, nil
}

func volume(pod corev1.PodSpec, name string) *corev1.Volume {
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == name {
			return &pod.Volumes[i]
		}
	}
	return nil
}

// dataVolume returns the data directory of container c (AGENTBUS_DATA, or
// the image's) and the volume mounted there, failing t unless one is,
// writable: mounted read-write, whole (no subPath), and of a kind a pod
// writes to (an emptyDir, an ephemeral or a persistent volume claim; not
// a ConfigMap, Secret or projection).
func dataVolume(t *testing.T, pod corev1.PodSpec, c corev1.Container) (string, *corev1.Volume) {
	t.Helper()
	dir := envValue(c, "AGENTBUS_DATA")
	if dir == "" {
		dir = image.DataDir
	}
	for _, vm := range c.VolumeMounts {
		if path.Clean(vm.MountPath) != path.Clean(dir) {
			continue
		}
		vol := volume(pod, vm.Name)
		switch {
		case vol == nil:
			t.Fatalf("the data directory %s mounts volume %q, which the pod does not have", dir, vm.Name)
		case vm.ReadOnly || vm.SubPath != "":
			t.Fatalf("the data directory %s is mounted read-only or as a subPath: %+v", dir, vm)
		case vol.EmptyDir == nil && vol.Ephemeral == nil && vol.PersistentVolumeClaim == nil:
			t.Fatalf("the data directory %s is volume %q, not one a pod writes to: %+v", dir, vol.Name, vol.VolumeSource)
		}
		return dir, vol
	}
	t.Fatalf("no volume is mounted at the data directory %s: with a read-only root filesystem agentbus cannot create %s/index and does not start", dir, dir)
	return "", nil
}

// TestChartProbesAnswer runs the binary as the chart's container would,
// with its arguments, environment and configuration file, against a
// nats-server of the test's own (addresses moved to free loopback ports),
// and checks that every probe the chart declares answers 200 on the port
// it names.
func TestChartProbesAnswer(t *testing.T) {
	files, err := render(t, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, files)
	pod := m.deployment.Spec.Template.Spec
	c := pod.Containers[0]
	raw, _ := mountedFile(t, m, pod, c, "/etc/agentbus/agentbus.yaml")
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(raw), &doc); err != nil {
		t.Fatal(err)
	}
	doc["nats"] = map[string]any{"url": testkit.NATSServer(t), "replicas": 1}
	cfgFile := filepath.Join(t.TempDir(), "agentbus.yaml")
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgFile, out, 0o600); err != nil {
		t.Fatal(err)
	}
	args := slices.Clone(c.Args)
	for i, a := range args {
		if a == "/etc/agentbus/agentbus.yaml" {
			args[i] = cfgFile
		}
	}
	// Each container port moves to a free loopback port, the data volume
	// to a directory of the test's.
	local := map[int32]string{}
	for _, p := range c.Ports {
		local[p.ContainerPort] = testkit.FreeAddr(t)
	}
	dataDir, _ := dataVolume(t, pod, c)
	data := t.TempDir()
	env := append(testkit.ProcessEnv(), "AGENTBUS_DATA="+data)
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil || e.Name == "AGENTBUS_DATA" {
			continue
		}
		if host, port, err := net.SplitHostPort(v); err == nil && host == "0.0.0.0" {
			n, _ := strconv.Atoi(port)
			v = local[int32(n)]
		}
		env = append(env, e.Name+"="+v)
	}
	var logs bytes.Buffer
	cmd := exec.Command(testkit.BuildAgentbus(t), args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("--- agentbus serve ---\n%s", logs.String())
		}
	})
	get := func(url string) int {
		resp, err := http.Get(url)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	api := "http://" + local[containerPort(t, c, "http").ContainerPort]
	testkit.EventuallyWithin(t, "the API answering on the http port", 60*time.Second, func() bool {
		return get(api+"/.well-known/agentproto") == http.StatusOK
	})
	if !hasOpsListener(t) {
		t.Skip("agentbus serve has no --ops-listen: the probes' /healthz and /readyz are not served by this binary")
	}
	for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
		url := fmt.Sprintf("http://%s%s", local[containerPort(t, c, p.HTTPGet.Port.String()).ContainerPort], p.HTTPGet.Path)
		testkit.EventuallyWithin(t, url+" answering 200", 30*time.Second, func() bool { return get(url) == http.StatusOK })
	}
	// Ready, it keeps its read models in the data volume.
	if fi, err := os.Stat(filepath.Join(data, "index")); err != nil || !fi.IsDir() {
		t.Errorf("agentbus serving keeps no read models in the data volume (%s/index): %v", dataDir, err)
	}
}
