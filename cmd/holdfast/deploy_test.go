package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/holdfast/holdfast/internal/deploy"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// deployed is what `holdfast deploy kubernetes` printed, each document
// decoded strictly into its Kubernetes type.
type deployed struct {
	peers, client *corev1.Service
	sts           *appsv1.StatefulSet
	pdb           *policyv1.PodDisruptionBudget
	raw           []string // the documents as printed
}

// runDeploy runs `holdfast deploy kubernetes` with args and returns its
// exit status, stdout and stderr.
func runDeploy(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"deploy", "kubernetes"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// splitDocuments splits a YAML stream at its "---" lines.
func splitDocuments(s string) []string {
	return strings.Split(s, "\n---\n")
}

// decodeStrict decodes one YAML document into out as the API server's
// strict field validation does: YAML to JSON refusing duplicate keys, then
// JSON matched case-sensitively (encoding/json would take
// readOnlyRootFileSystem for readOnlyRootFilesystem), failing on an unknown
// field, a duplicate field or a value of the wrong type.
func decodeStrict(doc string, out any) error {
	j, err := yaml.YAMLToJSONStrict([]byte(doc))
	if err != nil {
		return fmt.Errorf("YAML to JSON: %w", err)
	}
	strict, err := kjson.UnmarshalStrict(j, out)
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	return errors.Join(strict...)
}

// deployOK runs the command, which must succeed, and decodes what it
// printed: exactly four documents, each strictly, in the order of the
// command's help.
func deployOK(t *testing.T, args ...string) deployed {
	t.Helper()
	code, out, errOut := runDeploy(args...)
	if code != exitOK || errOut != "" {
		t.Fatalf("deploy kubernetes %q: exit %d, stderr %q", args, code, errOut)
	}
	docs := splitDocuments(out)
	if len(docs) != 4 {
		t.Fatalf("%d documents, want 4:\n%s", len(docs), out)
	}
	d := deployed{peers: &corev1.Service{}, client: &corev1.Service{}, sts: &appsv1.StatefulSet{}, pdb: &policyv1.PodDisruptionBudget{}, raw: docs}
	want := []struct {
		obj              any
		apiVersion, kind string
	}{
		{d.peers, "v1", "Service"},
		{d.client, "v1", "Service"},
		{d.sts, "apps/v1", "StatefulSet"},
		{d.pdb, "policy/v1", "PodDisruptionBudget"},
	}
	for i, w := range want {
		if err := decodeStrict(docs[i], w.obj); err != nil {
			t.Fatalf("document %d does not decode strictly into %T: %v\n%s", i+1, w.obj, err, docs[i])
		}
		var tm struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(docs[i]), &tm); err != nil {
			t.Fatal(err)
		}
		if tm.APIVersion != w.apiVersion || tm.Kind != w.kind {
			t.Errorf("document %d is %s %s, want %s %s", i+1, tm.APIVersion, tm.Kind, w.apiVersion, w.kind)
		}
	}
	return d
}

// contractArgs is the node's command line for three replicas named
// holdfast: the contract other parts of the project run nodes with.
var contractArgs = []string{
	"serve",
	"--node-id-from-hostname",
	"--data-dir=/var/lib/holdfast",
	"--http-addr=:7070",
	"--raft-addr=:7071",
	"--http-advertise=$(POD_NAME).holdfast-peers.$(POD_NAMESPACE).svc.cluster.local:7070",
	"--raft-advertise=$(POD_NAME).holdfast-peers.$(POD_NAMESPACE).svc.cluster.local:7071",
	"--join=dns:holdfast-peers.$(POD_NAMESPACE).svc.cluster.local:7070",
	"--bootstrap-expect=3",
	"--shutdown-timeout=20s",
	"--log-json",
}

// tlsArgs are the flags --tls-secret adds.
var tlsArgs = []string{
	"--tls-cert-file=/etc/holdfast/tls/api.crt",
	"--tls-key-file=/etc/holdfast/tls/api.key",
	"--peer-cert-file=/etc/holdfast/tls/$(POD_NAME).crt",
	"--peer-key-file=/etc/holdfast/tls/$(POD_NAME).key",
	"--peer-ca-file=/etc/holdfast/tls/ca.crt",
}

// checkLabels checks that labels hold the three app.kubernetes.io labels.
func checkLabels(t *testing.T, what string, labels map[string]string, instance string, version bool) {
	t.Helper()
	if labels["app.kubernetes.io/name"] != "holdfast" || labels["app.kubernetes.io/instance"] != instance {
		t.Errorf("%s labels %v", what, labels)
	}
	if !version {
		return
	}
	v := labels["app.kubernetes.io/version"]
	if v == "" {
		t.Errorf("%s has no version label: %v", what, labels)
	}
	if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
		t.Errorf("%s version label %q: %v", what, v, errs)
	}
}

// selects reports whether selector (a label match) selects labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestDeployKubernetesDefaults: the default manifests decode strictly into
// the API types and have every property the README relies on.
func TestDeployKubernetesDefaults(t *testing.T) {
	d := deployOK(t, "--image", "holdfast:test")

	for _, o := range []struct {
		what      string
		meta      map[string]string
		name, ns  string
		wantName  string
		versioned bool
	}{
		{"peers Service", d.peers.Labels, d.peers.Name, d.peers.Namespace, "holdfast-peers", true},
		{"client Service", d.client.Labels, d.client.Name, d.client.Namespace, "holdfast", true},
		{"StatefulSet", d.sts.Labels, d.sts.Name, d.sts.Namespace, "holdfast", true},
		{"PodDisruptionBudget", d.pdb.Labels, d.pdb.Name, d.pdb.Namespace, "holdfast", true},
	} {
		if o.name != o.wantName || o.ns != "default" {
			t.Errorf("%s is %s/%s, want default/%s", o.what, o.ns, o.name, o.wantName)
		}
		checkLabels(t, o.what, o.meta, "holdfast", o.versioned)
	}

	// The headless Service lists pods before they are ready.
	ps := d.peers.Spec
	if ps.ClusterIP != corev1.ClusterIPNone || !ps.PublishNotReadyAddresses {
		t.Errorf("peers Service: clusterIP %q, publishNotReadyAddresses %v", ps.ClusterIP, ps.PublishNotReadyAddresses)
	}
	checkPorts(t, "peers Service", ps.Ports, map[string]int32{"http": 7070, "raft": 7071})
	cs := d.client.Spec
	if cs.Type != corev1.ServiceTypeClusterIP || cs.PublishNotReadyAddresses {
		t.Errorf("client Service: type %q, publishNotReadyAddresses %v", cs.Type, cs.PublishNotReadyAddresses)
	}
	checkPorts(t, "client Service", cs.Ports, map[string]int32{"http": 7070})

	s := d.sts.Spec
	pod := s.Template.Spec
	podLabels := s.Template.Labels
	checkLabels(t, "pod template", podLabels, "holdfast", true)
	if s.Selector == nil || !selects(s.Selector.MatchLabels, podLabels) || !selects(ps.Selector, podLabels) ||
		!selects(cs.Selector, podLabels) || d.pdb.Spec.Selector == nil || !selects(d.pdb.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("a selector misses the pods %v: statefulset %v, peers %v, client %v, pdb %v", podLabels, s.Selector, ps.Selector, cs.Selector, d.pdb.Spec.Selector)
	}
	if _, ok := s.Selector.MatchLabels["app.kubernetes.io/version"]; ok {
		t.Error("the StatefulSet's selector, which cannot change, holds the version")
	}
	if s.ServiceName != "holdfast-peers" || s.Replicas == nil || *s.Replicas != 3 ||
		s.PodManagementPolicy != appsv1.ParallelPodManagement || s.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		t.Errorf("StatefulSet: serviceName %q, replicas %v, podManagementPolicy %q, updateStrategy %q",
			s.ServiceName, s.Replicas, s.PodManagementPolicy, s.UpdateStrategy.Type)
	}

	// The volume claim.
	if len(s.VolumeClaimTemplates) != 1 {
		t.Fatalf("%d volume claim templates", len(s.VolumeClaimTemplates))
	}
	vc := s.VolumeClaimTemplates[0]
	if vc.Name != "data" || !slices.Equal(vc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) || vc.Spec.StorageClassName != nil {
		t.Errorf("volume claim %q: access modes %v, storage class %v", vc.Name, vc.Spec.AccessModes, vc.Spec.StorageClassName)
	}
	if q := vc.Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(resource.MustParse("10Gi")) != 0 {
		t.Errorf("storage request %s, want 10Gi", q.String())
	}
	if _, ok := vc.Labels["app.kubernetes.io/version"]; ok {
		t.Error("the volume claim template, which cannot change, holds the version")
	}

	// The pod.
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("service links %v, service account token %v: want neither", pod.EnableServiceLinks, pod.AutomountServiceAccountToken)
	}
	if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds != 30 {
		t.Errorf("terminationGracePeriodSeconds %v", pod.TerminationGracePeriodSeconds)
	}
	sc := pod.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 ||
		sc.RunAsGroup == nil || *sc.RunAsGroup != 65532 || sc.FSGroup == nil || *sc.FSGroup != 65532 ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v", sc)
	}
	aa := pod.Affinity
	if aa == nil || aa.PodAntiAffinity == nil || len(aa.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		len(aa.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Fatalf("pod anti-affinity %+v", aa)
	}
	term := aa.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	if term.TopologyKey != "kubernetes.io/hostname" || term.LabelSelector == nil || !selects(term.LabelSelector.MatchLabels, podLabels) {
		t.Errorf("anti-affinity term %+v", term)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Name != "holdfast" || c.Image != "holdfast:test" {
		t.Errorf("container %q image %q", c.Name, c.Image)
	}
	if !slices.Equal(c.Command, []string{"/usr/local/bin/holdfast"}) {
		t.Errorf("command %q", c.Command)
	}
	if !slices.Equal(c.Args, contractArgs) {
		t.Errorf("args:\n%s\nwant:\n%s", strings.Join(c.Args, "\n"), strings.Join(contractArgs, "\n"))
	}
	checkEnv(t, c.Env, "holdfast-cluster-key")
	if len(c.Ports) != 2 || c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != 7070 || c.Ports[1].Name != "raft" || c.Ports[1].ContainerPort != 7071 {
		t.Errorf("container ports %+v", c.Ports)
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].Name != "data" || c.VolumeMounts[0].MountPath != "/var/lib/holdfast" {
		t.Errorf("volume mounts %+v", c.VolumeMounts)
	}
	if len(pod.Volumes) != 0 {
		t.Errorf("volumes without TLS: %+v", pod.Volumes)
	}
	checkProbes(t, c, corev1.URISchemeHTTP)
	csc := c.SecurityContext
	if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem || csc.AllowPrivilegeEscalation == nil ||
		*csc.AllowPrivilegeEscalation || csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v", csc)
	}
	wantRes := corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi"),
	}}
	checkResources(t, c.Resources, wantRes)

	if got := d.pdb.Spec.MinAvailable; got == nil || *got != intstr.FromInt32(2) || d.pdb.Spec.MaxUnavailable != nil {
		t.Errorf("PodDisruptionBudget minAvailable %v, maxUnavailable %v; want 2 of 3", got, d.pdb.Spec.MaxUnavailable)
	}
}

// checkPorts checks a Service's ports by name, each to the pod's port of
// the same name.
func checkPorts(t *testing.T, what string, ports []corev1.ServicePort, want map[string]int32) {
	t.Helper()
	got := map[string]int32{}
	for _, p := range ports {
		got[p.Name] = p.Port
		if p.TargetPort != intstr.FromString(p.Name) {
			t.Errorf("%s port %s targets %v, not the pod's port %s", what, p.Name, p.TargetPort.String(), p.Name)
		}
		if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
			t.Errorf("%s port %s protocol %s", what, p.Name, p.Protocol)
		}
	}
	if len(got) != len(want) || len(ports) != len(want) {
		t.Errorf("%s ports %v, want %v", what, got, want)
	}
	for n, p := range want {
		if got[n] != p {
			t.Errorf("%s port %s is %d, want %d", what, n, got[n], p)
		}
	}
}

// checkEnv checks the container's environment: the pod's name and
// namespace from the downward API, the cluster key from its Secret.
func checkEnv(t *testing.T, env []corev1.EnvVar, keySecret string) {
	t.Helper()
	if len(env) != 3 {
		t.Fatalf("env %+v", env)
	}
	for i, field := range []string{"metadata.name", "metadata.namespace"} {
		e := env[i]
		if e.Name != []string{"POD_NAME", "POD_NAMESPACE"}[i] || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != field {
			t.Errorf("env %d: %+v", i, e)
		}
	}
	k := env[2]
	if k.Name != "HOLDFAST_CLUSTER_KEY" || k.Value != "" || k.ValueFrom == nil || k.ValueFrom.SecretKeyRef == nil ||
		k.ValueFrom.SecretKeyRef.Name != keySecret || k.ValueFrom.SecretKeyRef.Key != "cluster-key" {
		t.Errorf("cluster key env %+v", k)
	}
}

// checkProbes checks the three probes: ready on /readyz, alive on
// /healthz, with a start that may take long.
func checkProbes(t *testing.T, c corev1.Container, scheme corev1.URIScheme) {
	t.Helper()
	for _, p := range []struct {
		what              string
		probe             *corev1.Probe
		path              string
		period, threshold int32
	}{
		{"readiness", c.ReadinessProbe, "/readyz", 2, 3},
		{"liveness", c.LivenessProbe, "/healthz", 10, 6},
		{"startup", c.StartupProbe, "/healthz", 10, 180},
	} {
		pr := p.probe
		if pr == nil || pr.HTTPGet == nil {
			t.Errorf("%s probe %+v", p.what, pr)
			continue
		}
		g := pr.HTTPGet
		gotScheme := g.Scheme
		if gotScheme == "" {
			gotScheme = corev1.URISchemeHTTP // the API server's default
		}
		if g.Path != p.path || g.Port != intstr.FromString("http") || gotScheme != scheme ||
			pr.PeriodSeconds != p.period || pr.FailureThreshold != p.threshold {
			t.Errorf("%s probe: %s %s port %s, period %d, failures %d", p.what, gotScheme, g.Path, g.Port.String(), pr.PeriodSeconds, pr.FailureThreshold)
		}
	}
	// The startup probe gives a node that rebuilds its store from a
	// snapshot at least 20 minutes before liveness counts.
	if sp := c.StartupProbe; sp != nil && time.Duration(sp.PeriodSeconds*sp.FailureThreshold)*time.Second < 20*time.Minute {
		t.Errorf("the startup probe allows only %ds", sp.PeriodSeconds*sp.FailureThreshold)
	}
}

// checkResources checks requests and limits against want, quantity by
// quantity.
func checkResources(t *testing.T, got, want corev1.ResourceRequirements) {
	t.Helper()
	for _, l := range []struct {
		what      string
		got, want corev1.ResourceList
	}{{"requests", got.Requests, want.Requests}, {"limits", got.Limits, want.Limits}} {
		if len(l.got) != len(l.want) {
			t.Errorf("%s %v, want %v", l.what, l.got, l.want)
			continue
		}
		for name, q := range l.want {
			if g, ok := l.got[name]; !ok || g.Cmp(q) != 0 {
				t.Errorf("%s %s: %s, want %s", l.what, name, g.String(), q.String())
			}
		}
	}
}

// TestDeployKubernetesFiveWithTLS: five replicas keep a quorum of three, and
// --tls-secret mounts the Secret and passes its files to serve.
func TestDeployKubernetesFiveWithTLS(t *testing.T) {
	d := deployOK(t, "--image", "registry.example/holdfast@sha256:0123abcd", "--name", "locks", "--namespace", "infra",
		"--replicas", "5", "--tls-secret", "locks-tls", "--cluster-key-secret", "locks-key", "--cluster-domain", "corp.internal",
		"--storage", "50Gi", "--storage-class", "fast-ssd", "--cpu-request", "1", "--memory-request", "1Gi", "--memory-limit", "2Gi")
	if d.peers.Name != "locks-peers" || d.client.Name != "locks" || d.sts.Name != "locks" || d.pdb.Name != "locks" {
		t.Errorf("names %s %s %s %s", d.peers.Name, d.client.Name, d.sts.Name, d.pdb.Name)
	}
	for _, ns := range []string{d.peers.Namespace, d.client.Namespace, d.sts.Namespace, d.pdb.Namespace} {
		if ns != "infra" {
			t.Errorf("namespace %q", ns)
		}
	}
	checkLabels(t, "pod template", d.sts.Spec.Template.Labels, "locks", true)
	s := d.sts.Spec
	if *s.Replicas != 5 || s.ServiceName != "locks-peers" {
		t.Errorf("replicas %d, serviceName %s", *s.Replicas, s.ServiceName)
	}
	if got := d.pdb.Spec.MinAvailable; got == nil || *got != intstr.FromInt32(3) {
		t.Errorf("minAvailable %v, want 3 of 5", got)
	}
	vc := s.VolumeClaimTemplates[0]
	if vc.Spec.StorageClassName == nil || *vc.Spec.StorageClassName != "fast-ssd" {
		t.Errorf("storage class %v", vc.Spec.StorageClassName)
	}
	if q := vc.Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(resource.MustParse("50Gi")) != 0 {
		t.Errorf("storage %s", q.String())
	}
	c := s.Template.Spec.Containers[0]
	want := []string{
		"serve",
		"--node-id-from-hostname",
		"--data-dir=/var/lib/holdfast",
		"--http-addr=:7070",
		"--raft-addr=:7071",
		"--http-advertise=$(POD_NAME).locks-peers.$(POD_NAMESPACE).svc.corp.internal:7070",
		"--raft-advertise=$(POD_NAME).locks-peers.$(POD_NAMESPACE).svc.corp.internal:7071",
		"--join=dns:locks-peers.$(POD_NAMESPACE).svc.corp.internal:7070",
		"--bootstrap-expect=5",
		"--shutdown-timeout=20s",
		"--log-json",
	}
	want = append(want, tlsArgs...)
	if !slices.Equal(c.Args, want) {
		t.Errorf("args:\n%s\nwant:\n%s", strings.Join(c.Args, "\n"), strings.Join(want, "\n"))
	}
	checkEnv(t, c.Env, "locks-key")
	checkProbes(t, c, corev1.URISchemeHTTPS)
	if len(c.VolumeMounts) != 2 || c.VolumeMounts[1].Name != "tls" || c.VolumeMounts[1].MountPath != "/etc/holdfast/tls" ||
		!c.VolumeMounts[1].ReadOnly || c.VolumeMounts[1].SubPath != "" {
		t.Errorf("volume mounts %+v", c.VolumeMounts)
	}
	vols := s.Template.Spec.Volumes
	if len(vols) != 1 || vols[0].Name != "tls" || vols[0].Secret == nil || vols[0].Secret.SecretName != "locks-tls" ||
		vols[0].Secret.DefaultMode == nil || *vols[0].Secret.DefaultMode != 0o440 {
		t.Errorf("volumes %+v", vols)
	}
	checkResources(t, c.Resources, corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
	})
	// The first comment has the commands that make the Secret, for this
	// name, namespace, domain and number of pods.
	for _, w := range []string{
		"#   holdfast tls cert create --dir tls --node-id api --hosts '*.locks-peers.infra.svc.corp.internal,locks-peers.infra.svc.corp.internal,locks,locks.infra,locks.infra.svc,locks.infra.svc.corp.internal,localhost,127.0.0.1'\n",
		"#   for i in $(seq 0 4); do holdfast tls cert create --dir tls --node-id locks-$i --hosts locks-$i.locks-peers.infra.svc.corp.internal; done\n",
		"#   kubectl create secret generic locks-tls --namespace infra ",
	} {
		if !strings.Contains(d.raw[0], w) {
			t.Errorf("the first comment lacks %q:\n%s", w, d.raw[0])
		}
	}
	// A peer's certificate file is the pod's name, which is its node id.
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--peer-cert-file=") && a != "--peer-cert-file=/etc/holdfast/tls/$(POD_NAME).crt" {
			t.Errorf("peer certificate %s", a)
		}
	}
}

// TestDeployKubernetesResourcesOptional: an empty request leaves it out.
func TestDeployKubernetesResourcesOptional(t *testing.T) {
	d := deployOK(t, "--image", "holdfast:test", "--cpu-request", "", "--memory-request", "")
	if r := d.sts.Spec.Template.Spec.Containers[0].Resources; len(r.Requests) != 0 || len(r.Limits) != 0 {
		t.Errorf("resources %+v", r)
	}
	d = deployOK(t, "--image", "holdfast:test", "--cpu-request", "", "--memory-request", "", "--memory-limit", "1.5Gi")
	checkResources(t, d.sts.Spec.Template.Spec.Containers[0].Resources, corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1536Mi")},
	})
}

// TestDeployKubernetesStrictDecodingCatchesMistakes: the strict decoding
// the tests above rely on refuses a misspelled field, a duplicate field
// and a value of the wrong type in the printed manifests, so they cannot
// pass over such a mistake.
func TestDeployKubernetesStrictDecodingCatchesMistakes(t *testing.T) {
	d := deployOK(t, "--image", "holdfast:test")
	for _, m := range []struct {
		what, old, new string
		doc            int
		into           any
	}{
		{"a misspelled field", "publishNotReadyAddresses: true", "publishNotReadyAdresses: true", 0, &corev1.Service{}},
		{"a duplicate field", "podManagementPolicy: Parallel", "podManagementPolicy: Parallel\n  podManagementPolicy: OrderedReady", 2, &appsv1.StatefulSet{}},
		{"a misplaced field", "readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true", 2, &appsv1.StatefulSet{}},
		{"a wrong type", "minAvailable: 2", "minAvailable: [2]", 3, &policyv1.PodDisruptionBudget{}},
	} {
		doc := d.raw[m.doc]
		if !strings.Contains(doc, m.old) {
			t.Fatalf("document %d lacks %q", m.doc+1, m.old)
		}
		if err := decodeStrict(strings.Replace(doc, m.old, m.new, 1), m.into); err == nil {
			t.Errorf("%s decoded without an error", m.what)
		}
	}
}

// TestDeployKubernetesArgsAreServeFlags: every argument the StatefulSet
// gives `holdfast serve` is a flag serve knows, with a value it takes.
func TestDeployKubernetesArgsAreServeFlags(t *testing.T) {
	d := deployOK(t, "--image", "holdfast:test", "--tls-secret", "holdfast-tls")
	args := d.sts.Spec.Template.Spec.Containers[0].Args
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("args %q do not run serve", args)
	}
	// Kubernetes expands $(VAR) from the container's environment.
	expand := strings.NewReplacer("$(POD_NAME)", "holdfast-0", "$(POD_NAMESPACE)", "default")
	var flags []string
	for _, a := range args[1:] {
		flags = append(flags, expand.Replace(a))
		if strings.Contains(expand.Replace(a), "$(") {
			t.Errorf("%s refers to a variable the container does not define", a)
		}
	}
	// A node id from the environment would clash with --node-id-from-hostname.
	t.Setenv("HOLDFAST_NODE_ID", "")
	var stderr bytes.Buffer
	c, err := parseServeFlags(flags, &stderr)
	if err != nil {
		t.Fatalf("holdfast serve refuses the StatefulSet's arguments: %v\n%s", err, stderr.String())
	}
	if c.dataDir != "/var/lib/holdfast" || c.httpAddr != ":7070" || c.raftAddr != ":7071" || c.bootstrapExpect != 3 ||
		c.shutdownTimeout != 20*time.Second || !c.logJSON || c.join != "dns:holdfast-peers.default.svc.cluster.local:7070" ||
		c.httpAdvertise != "holdfast-0.holdfast-peers.default.svc.cluster.local:7070" ||
		c.raftAdvertise != "holdfast-0.holdfast-peers.default.svc.cluster.local:7071" {
		t.Errorf("serve read %+v", c)
	}
	if c.tls.certFile != "/etc/holdfast/tls/api.crt" || c.tls.keyFile != "/etc/holdfast/tls/api.key" ||
		c.tls.peerCertFile != "/etc/holdfast/tls/holdfast-0.crt" || c.tls.peerKeyFile != "/etc/holdfast/tls/holdfast-0.key" ||
		c.tls.peerCAFile != "/etc/holdfast/tls/ca.crt" {
		t.Errorf("serve read the TLS files %+v", c.tls)
	}
	// The graceful stop fits in the pod's grace period.
	if grace := d.sts.Spec.Template.Spec.TerminationGracePeriodSeconds; time.Duration(*grace)*time.Second <= c.shutdownTimeout {
		t.Errorf("terminationGracePeriodSeconds %d is not above --shutdown-timeout %s", *grace, c.shutdownTimeout)
	}
}

// TestDeployKubernetesFlagErrors: a bad value exits 2, prints nothing on
// stdout, and names the flag and its rule.
func TestDeployKubernetesFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--replicas", "4"}, []string{"--replicas", "3 or 5"}},
		{[]string{"--replicas", "1"}, []string{"--replicas", "3 or 5"}},
		{[]string{"--replicas", "three"}, []string{"-replicas"}},
		{[]string{"--name", "Holdfast"}, []string{"--name", "DNS-1123 label"}},
		{[]string{"--name", "1holdfast"}, []string{"--name", "starting with a lower-case letter"}},
		{[]string{"--name", strings.Repeat("a", 53)}, []string{"--name", "1 to 52 characters"}},
		{[]string{"--namespace", "my_ns"}, []string{"--namespace", "DNS-1123 label"}},
		{[]string{"--storage", "10GB"}, []string{"--storage", "Kubernetes quantity", "10Gi"}},
		{[]string{"--storage", "0"}, []string{"--storage", "positive"}},
		{[]string{"--memory-request", "512m"}, []string{"--memory-request", "milli"}},
		{[]string{"--memory-request", "1Gi", "--memory-limit", "512Mi"}, []string{"--memory-limit", "not be below --memory-request"}},
		{[]string{"--cpu-request", "a lot"}, []string{"--cpu-request", "Kubernetes quantity"}},
		{[]string{"--tls-secret", "TLS"}, []string{"--tls-secret", "Secret name"}},
		{[]string{"--cluster-key-secret", "key secret"}, []string{"--cluster-key-secret", "Secret name"}},
		{[]string{"--cluster-domain", "cluster.local."}, []string{"--cluster-domain", "DNS domain"}},
		{[]string{"--storage-class", "Fast"}, []string{"--storage-class", "StorageClass"}},
		{[]string{"--image", "holdfast:test\n  evil: true"}, []string{"--image", "image reference"}},
		{[]string{"--bogus"}, []string{"-bogus"}},
		{[]string{"extra"}, []string{"unexpected argument"}},
	} {
		args := append([]string{"--image", "holdfast:test"}, c.args...)
		code, out, errOut := runDeploy(args...)
		if code != exitUsage || out != "" {
			t.Errorf("%q: exit %d, stdout %q", c.args, code, out)
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%q: stderr lacks %q: %s", c.args, w, errOut)
			}
		}
	}
	code, out, errOut := runDeploy()
	if code != exitUsage || out != "" || !strings.Contains(errOut, "--image") || !strings.Contains(errOut, "required") {
		t.Errorf("no --image: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestDeployKubernetesAcceptsWhatKubernetesAccepts: the values the command
// takes are ones Kubernetes takes, with the same meaning.
func TestDeployKubernetesAcceptsWhatKubernetesAccepts(t *testing.T) {
	for _, q := range []string{"10Gi", "1.5Ti", "500M", "100k", "1e3", "0.5Gi", ".5Gi", "1.Gi", "10Mi"} {
		code, out, _ := runDeploy("--image", "holdfast:test", "--storage", q)
		want, err := resource.ParseQuantity(q)
		switch {
		case code == exitOK && err != nil:
			t.Errorf("--storage %s taken, but Kubernetes refuses it: %v", q, err)
		case code == exitOK:
			var sts appsv1.StatefulSet
			if err := decodeStrict(splitDocuments(out)[2], &sts); err != nil {
				t.Fatal(err)
			}
			got := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]
			if got.Cmp(want) != 0 {
				t.Errorf("--storage %s became %s", q, got.String())
			}
		case code != exitUsage:
			t.Errorf("--storage %s: exit %d", q, code)
		}
	}
	for _, name := range []string{"holdfast", "a", "locks-2", "x" + strings.Repeat("-y", 25), "Holdfast", "-a", "a-", "1a", "a.b"} {
		code, _, _ := runDeploy("--image", "holdfast:test", "--name", name)
		if code == exitOK {
			// The name is a Service's (RFC 1035) and the start of every pod's.
			if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
				t.Errorf("--name %s taken, but a Service cannot be named so: %v", name, errs)
			}
			if errs := validation.IsDNS1123Label(name + "-peers"); len(errs) > 0 {
				t.Errorf("--name %s taken: %v", name, errs)
			}
		}
	}
	for _, ns := range []string{"default", "kube-system", "0ns", "Ns", "n_s"} {
		code, _, _ := runDeploy("--image", "holdfast:test", "--namespace", ns)
		if errs := validation.IsDNS1123Label(ns); (code == exitOK) != (len(errs) == 0) {
			t.Errorf("--namespace %s: exit %d, Kubernetes says %v", ns, code, errs)
		}
	}
}

// TestDeployHelp: `holdfast deploy -h` lists kubernetes, `holdfast deploy
// kubernetes -h` its flags, both on stdout, and the command list and the
// command line's README name the command.
func TestDeployHelp(t *testing.T) {
	for args, want := range map[string][]string{
		"deploy -h":            {"kubernetes"},
		"deploy --help":        {"kubernetes"},
		"deploy kubernetes -h": {"--image", "--replicas", "--tls-secret", "--cluster-key-secret", "cluster-key", "3 or 5"},
		"--help":               {"deploy"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(strings.Fields(args), &stdout, &stderr)
		if code != exitOK || stderr.Len() != 0 {
			t.Errorf("%s: exit %d, stderr %q", args, code, stderr.String())
		}
		for _, w := range want {
			if !strings.Contains(stdout.String(), w) {
				t.Errorf("%s: stdout lacks %q", args, w)
			}
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"deploy", "kubernets"}, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), `did you mean "kubernetes"`) {
		t.Errorf("deploy kubernets: exit %d: %s", code, stderr.String())
	}
	if !slices.Contains(commandNames(), "deploy") {
		t.Error("commandNames lacks deploy")
	}
	var usageText bytes.Buffer
	usage(&usageText)
	for _, name := range commandNames() {
		if !strings.Contains(usageText.String(), "\n  "+name+" ") {
			t.Errorf("the command list does not name %q", name)
		}
	}
}

// TestDeployKubernetesPrintsNothingElse: the output is the manifests alone
// (a pipe into kubectl apply -f - works), and two runs print the same.
func TestDeployKubernetesPrintsNothingElse(t *testing.T) {
	_, a, _ := runDeploy("--image", "holdfast:test")
	_, b, _ := runDeploy("--image", "holdfast:test")
	if a != b {
		t.Error("two runs printed different manifests")
	}
	for i, doc := range splitDocuments(a) {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil || m["kind"] == nil {
			t.Errorf("document %d: %v %v", i+1, err, m)
		}
		j, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil || !json.Valid(j) {
			t.Errorf("document %d is not strict YAML: %v", i+1, err)
		}
	}
	if !strings.Contains(a, "# holdfast on Kubernetes, made by: holdfast deploy kubernetes --image holdfast:test\n") {
		t.Errorf("the first comment does not give the command line:\n%s", a[:min(len(a), 300)])
	}
}

// TestDeployKubernetesReadmeTLSCommands: the README's commands for the TLS
// Secret are the ones the command prints for the default manifests.
func TestDeployKubernetesReadmeTLSCommands(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	k := deploy.Kubernetes{Name: "holdfast", Namespace: "default", Replicas: 3, ClusterDomain: "cluster.local", TLSSecret: "holdfast-tls"}
	for _, line := range k.TLSCommands() {
		line = strings.ReplaceAll(line, "holdfast tls", "./holdfast tls")
		if !strings.Contains(string(readme), "\n"+line+"\n") {
			t.Errorf("the README lacks the line\n%s", line)
		}
	}
}
