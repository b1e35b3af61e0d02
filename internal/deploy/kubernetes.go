package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"text/template"
)

// The fixed parts of the pod: where the binary, the data and the TLS files
// are, and the ports. The command line ServeArgs returns uses them.
const (
	// Binary is the path of holdfast in the container image.
	Binary = "/usr/local/bin/holdfast"
	// DataDir is where each pod's volume is mounted: serve's --data-dir.
	DataDir = "/var/lib/holdfast"
	// TLSDir is where the --tls-secret Secret is mounted.
	TLSDir = "/etc/holdfast/tls"
	// HTTPPort is the API's port, on the pods and on both Services.
	HTTPPort = 7070
	// RaftPort is the Raft transport's port.
	RaftPort = 7071
	// ClusterKeyKey is the key of the cluster-key Secret that holds the key.
	ClusterKeyKey = "cluster-key"
	// RunAs is the user and group id the node runs as (the uid and gid of
	// "nonroot" in distroless images).
	RunAs = 65532
)

// Kubernetes is what `holdfast deploy kubernetes` is asked for; each field
// is the flag of the same name. Render and Validate name the flag in every
// error.
type Kubernetes struct {
	Name             string // --name: the StatefulSet, the client Service; the headless Service is Name-peers
	Namespace        string // --namespace
	Replicas         int    // --replicas: 3 or 5
	Image            string // --image: holds holdfast at Binary
	Storage          string // --storage: each pod's volume, a quantity such as 10Gi
	StorageClass     string // --storage-class: "" for the cluster's default
	TLSSecret        string // --tls-secret: "" for plain HTTP and an unauthenticated Raft port
	ClusterKeySecret string // --cluster-key-secret: "" for Name-cluster-key
	ClusterDomain    string // --cluster-domain
	CPURequest       string // --cpu-request: "" for none
	MemoryRequest    string // --memory-request: "" for none
	MemoryLimit      string // --memory-limit: "" for none
	// Version is the app.kubernetes.io/version label's value; LabelValue
	// makes one of any version string.
	Version string
	// Command is the command line that made the manifests, written in
	// their first comment ("" for none). It must be one line.
	Command string
}

// FlagError is a flag value that breaks a rule, or a required flag that
// was not given.
type FlagError struct {
	Flag    string // the flag's name, without dashes
	Value   string
	Rule    string // what a value must be, and why where it is not obvious
	Missing bool   // the flag is required and was not given
}

func (e *FlagError) Error() string {
	if e.Missing {
		return fmt.Sprintf("--%s is required: %s", e.Flag, e.Rule)
	}
	return fmt.Sprintf("--%s %q: %s", e.Flag, e.Value, e.Rule)
}

// MaxNameLen is the longest --name: a StatefulSet's pods carry the label
// controller-revision-hash, NAME-<hash of up to 10 characters>, and a label
// value has at most 63 characters.
const MaxNameLen = 52

var (
	dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dns1035Label = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
	// quantity is a Kubernetes quantity without sign or exponent: digits
	// with an optional fraction, then an optional suffix.
	quantity = regexp.MustCompile(`^([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$`)
	// imageRef is the characters an image reference is made of.
	imageRef = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@-]*$`)
)

// suffixes are the quantity suffixes and their multipliers.
var suffixes = map[string]*big.Rat{
	"": big.NewRat(1, 1), "n": big.NewRat(1, 1e9), "u": big.NewRat(1, 1e6), "m": big.NewRat(1, 1e3),
	"k": big.NewRat(1e3, 1), "M": big.NewRat(1e6, 1), "G": big.NewRat(1e9, 1), "T": big.NewRat(1e12, 1),
	"P": big.NewRat(1e15, 1), "E": big.NewRat(1e18, 1),
	"Ki": big.NewRat(1<<10, 1), "Mi": big.NewRat(1<<20, 1), "Gi": big.NewRat(1<<30, 1), "Ti": big.NewRat(1<<40, 1),
	"Pi": big.NewRat(1<<50, 1), "Ei": big.NewRat(1<<60, 1),
}

// parseQuantity reads s as checked by the quantity expression and returns
// its value and suffix.
func parseQuantity(s string) (*big.Rat, string, bool) {
	m := quantity.FindStringSubmatch(s)
	if m == nil {
		return nil, "", false
	}
	num := m[1]
	if strings.HasSuffix(num, ".") {
		num += "0"
	}
	if strings.HasPrefix(num, ".") {
		num = "0" + num
	}
	v, ok := new(big.Rat).SetString(num)
	if !ok {
		return nil, "", false
	}
	return v.Mul(v, suffixes[m[3]]), m[3], true
}

// checkQuantity checks a resource flag: a positive quantity; one of bytes
// (memory, storage: inBytes) refuses the fractional suffixes, whose m
// means milli.
func checkQuantity(flag, s string, inBytes bool) (*big.Rat, error) {
	const rule = "must be a Kubernetes quantity: a positive number with an optional suffix, such as "
	example := "10Gi, 512Mi or 500M"
	if !inBytes {
		example = "250m (a quarter of a CPU), 1 or 1.5"
	}
	v, suffix, ok := parseQuantity(s)
	switch {
	case !ok || v.Sign() <= 0:
		return nil, &FlagError{Flag: flag, Value: s, Rule: rule + example}
	case inBytes && (suffix == "m" || suffix == "u" || suffix == "n"):
		return nil, &FlagError{Flag: flag, Value: s, Rule: fmt.Sprintf("the suffix %s is a fraction (m is milli: a thousandth of a byte); bytes take Ki, Mi, Gi, Ti (powers of 1024) or k, M, G, T, such as %s", suffix, example)}
	}
	return v, nil
}

// checkLabel checks a flag that names an object or namespace: a DNS-1123
// label of at most maxLen characters, starting with a letter if letter;
// why is added to the rule.
func checkLabel(flag, s string, maxLen int, letter bool, why string) error {
	re, start := dns1123Label, "a lower-case letter or digit"
	if letter {
		re, start = dns1035Label, "a lower-case letter"
	}
	if len(s) > maxLen || !re.MatchString(s) {
		return &FlagError{Flag: flag, Value: s, Rule: fmt.Sprintf("must be a DNS-1123 label of 1 to %d characters: lower-case letters, digits and '-', starting with %s and ending with a letter or digit%s", maxLen, start, why)}
	}
	return nil
}

// checkSubdomain checks a flag that names a Secret or a StorageClass, or a
// DNS domain: a DNS-1123 subdomain (labels joined by dots, at most 253
// characters).
func checkSubdomain(flag, s, what string) error {
	ok := len(s) <= 253 && s != ""
	for _, l := range strings.Split(s, ".") {
		ok = ok && len(l) <= 63 && dns1123Label.MatchString(l)
	}
	if !ok {
		return &FlagError{Flag: flag, Value: s, Rule: fmt.Sprintf("must be %s: a DNS-1123 subdomain, lower-case letters, digits and '-' in labels of at most 63 characters joined by '.', at most 253 characters, each label starting and ending with a letter or digit", what)}
	}
	return nil
}

// withDefaults is k with the defaults that follow other fields filled in.
func (k Kubernetes) withDefaults() Kubernetes {
	if k.ClusterKeySecret == "" {
		k.ClusterKeySecret = k.Name + "-cluster-key"
	}
	return k
}

// Validate checks every field; the error is a *FlagError for the first
// field that breaks its rule.
func (k Kubernetes) Validate() error {
	k = k.withDefaults()
	if err := checkLabel("name", k.Name, MaxNameLen, true, " (it names the Services, which must start with a letter, and the StatefulSet, whose pods' revision label adds up to 11 characters)"); err != nil {
		return err
	}
	if err := checkLabel("namespace", k.Namespace, 63, false, ""); err != nil {
		return err
	}
	if k.Replicas != 3 && k.Replicas != 5 {
		return &FlagError{Flag: "replicas", Value: strconv.Itoa(k.Replicas), Rule: "must be 3 or 5: three voters keep serving with one of them down, five with two; an even number tolerates no more losses than the odd number below it, and one node has none to lose"}
	}
	switch {
	case k.Image == "":
		return &FlagError{Flag: "image", Rule: fmt.Sprintf("the container image with holdfast at %s (the README's \"Running on Kubernetes\" says what it needs)", Binary), Missing: true}
	case len(k.Image) > 1024 || !imageRef.MatchString(k.Image):
		return &FlagError{Flag: "image", Value: k.Image, Rule: "must be an image reference such as registry.example/holdfast:1.4.0: letters, digits and . _ - / : @, starting with a letter or digit"}
	}
	if _, err := checkQuantity("storage", k.Storage, true); err != nil {
		return err
	}
	if k.StorageClass != "" {
		if err := checkSubdomain("storage-class", k.StorageClass, "a StorageClass name"); err != nil {
			return err
		}
	}
	if k.TLSSecret != "" {
		if err := checkSubdomain("tls-secret", k.TLSSecret, "a Secret name"); err != nil {
			return err
		}
	}
	if err := checkSubdomain("cluster-key-secret", k.ClusterKeySecret, "a Secret name"); err != nil {
		return err
	}
	if err := checkSubdomain("cluster-domain", k.ClusterDomain, "the cluster's DNS domain, such as cluster.local, without a trailing dot"); err != nil {
		return err
	}
	// The longest name a member advertises: NAME-4.NAME-peers.NS.svc.DOMAIN.
	if fqdn := k.podHost(k.Replicas-1, k.Namespace); len(fqdn) > 253 {
		return &FlagError{Flag: "cluster-domain", Value: k.ClusterDomain, Rule: fmt.Sprintf("with --name and --namespace makes the pods' DNS names too long (%d characters, at most 253): %s", len(fqdn), fqdn)}
	}
	if k.CPURequest != "" {
		if _, err := checkQuantity("cpu-request", k.CPURequest, false); err != nil {
			return err
		}
	}
	var request *big.Rat
	if k.MemoryRequest != "" {
		var err error
		if request, err = checkQuantity("memory-request", k.MemoryRequest, true); err != nil {
			return err
		}
	}
	if k.MemoryLimit != "" {
		limit, err := checkQuantity("memory-limit", k.MemoryLimit, true)
		if err != nil {
			return err
		}
		if request != nil && limit.Cmp(request) < 0 {
			return &FlagError{Flag: "memory-limit", Value: k.MemoryLimit, Rule: fmt.Sprintf("must not be below --memory-request %s", k.MemoryRequest)}
		}
	}
	if k.Version == "" || LabelValue(k.Version) != k.Version {
		return fmt.Errorf("version %q is not a label value (LabelValue makes one)", k.Version)
	}
	if strings.ContainsAny(k.Command, "\r\n") {
		return fmt.Errorf("the command line for the manifests' comment holds a line break")
	}
	return nil
}

// peersHost is the headless Service's DNS name in namespace ns (a name, or
// "$(POD_NAMESPACE)" for the pod's own).
func (k Kubernetes) peersHost(ns string) string {
	return k.Name + "-peers." + ns + ".svc." + k.ClusterDomain
}

// podHost is the DNS name of pod ordinal i in namespace ns.
func (k Kubernetes) podHost(i int, ns string) string {
	return k.Name + "-" + strconv.Itoa(i) + "." + k.peersHost(ns)
}

// ServeArgs is the container's argument list: `holdfast serve` and its
// flags. The node takes its id from its host name (the pod's name), listens
// on every address, advertises its stable DNS name under the headless
// Service and finds the other members through that Service's DNS name.
// $(POD_NAME) and $(POD_NAMESPACE) are expanded by Kubernetes from the
// container's environment.
func (k Kubernetes) ServeArgs() []string {
	self := "$(POD_NAME)." + k.peersHost("$(POD_NAMESPACE)")
	args := []string{
		"serve",
		"--node-id-from-hostname",
		"--data-dir=" + DataDir,
		fmt.Sprintf("--http-addr=:%d", HTTPPort),
		fmt.Sprintf("--raft-addr=:%d", RaftPort),
		fmt.Sprintf("--http-advertise=%s:%d", self, HTTPPort),
		fmt.Sprintf("--raft-advertise=%s:%d", self, RaftPort),
		fmt.Sprintf("--join=dns:%s:%d", k.peersHost("$(POD_NAMESPACE)"), HTTPPort),
		"--bootstrap-expect=" + strconv.Itoa(k.Replicas),
		"--shutdown-timeout=20s",
		"--log-json",
	}
	if k.TLSSecret != "" {
		args = append(args,
			"--tls-cert-file="+TLSDir+"/api.crt",
			"--tls-key-file="+TLSDir+"/api.key",
			"--peer-cert-file="+TLSDir+"/$(POD_NAME).crt",
			"--peer-key-file="+TLSDir+"/$(POD_NAME).key",
			"--peer-ca-file="+TLSDir+"/ca.crt",
		)
	}
	return args
}

// APIHosts are the names the API certificate (api.crt of --tls-secret)
// must carry: every pod's name under the headless Service (other members
// call each pod's API there and check its certificate for that name), the
// headless Service's own, the client Service's short and full names, and
// loopback for kubectl port-forward and kubectl exec.
func (k Kubernetes) APIHosts() []string {
	k = k.withDefaults()
	full := k.Name + "." + k.Namespace + ".svc." + k.ClusterDomain
	return []string{
		"*." + k.peersHost(k.Namespace),
		k.peersHost(k.Namespace),
		k.Name, k.Name + "." + k.Namespace, k.Name + "." + k.Namespace + ".svc", full,
		"localhost", "127.0.0.1",
	}
}

// TLSCommands are shell commands that make the files of the --tls-secret
// Secret with holdfast's own CA (in ./tls) and create the Secret: the CA
// certificate as ca.crt, the API certificate as api.crt and api.key, and
// each pod's node certificate, which names the pod (its node id), as
// POD.crt and POD.key. The CA's key is never put in the Secret.
func (k Kubernetes) TLSCommands() []string {
	k = k.withDefaults()
	last := strconv.Itoa(k.Replicas - 1)
	secret := k.TLSSecret
	if secret == "" {
		secret = k.Name + "-tls"
	}
	pod := k.Name + "-$i"
	return []string{
		"holdfast tls ca create --dir tls",
		"holdfast tls cert create --dir tls --node-id api --hosts '" + strings.Join(k.APIHosts(), ",") + "'",
		"for i in $(seq 0 " + last + "); do holdfast tls cert create --dir tls --node-id " + pod + " --hosts " + pod + "." + k.peersHost(k.Namespace) + "; done",
		"kubectl create secret generic " + secret + " --namespace " + k.Namespace +
			" --from-file=ca.crt=tls/holdfast-ca.pem --from-file=api.crt=tls/api.pem --from-file=api.key=tls/api-key.pem" +
			" $(for i in $(seq 0 " + last + "); do echo --from-file=" + pod + ".crt=tls/" + pod + ".pem --from-file=" + pod + ".key=tls/" + pod + "-key.pem; done)",
	}
}

// Quorum is the number of members that must be up for the cluster to
// serve writes: a majority of the replicas.
func (k Kubernetes) Quorum() int { return k.Replicas/2 + 1 }

// Render checks k and writes the manifests to w: four YAML documents
// separated by "---". Nothing is written when k is not valid.
func (k Kubernetes) Render(w io.Writer) error {
	if err := k.Validate(); err != nil {
		return err
	}
	k = k.withDefaults()
	var buf bytes.Buffer
	v := view{Kubernetes: k, Args: k.ServeArgs(), Quorum: k.Quorum(), TLSCommands: k.TLSCommands(),
		Binary: Binary, DataDir: DataDir, TLSDir: TLSDir, HTTPPort: HTTPPort, RaftPort: RaftPort, RunAs: RunAs, KeyKey: ClusterKeyKey}
	if err := manifests.Execute(&buf, v); err != nil {
		return fmt.Errorf("render the manifests: %w", err)
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write the manifests: %w", err)
	}
	return nil
}

// view is what the template reads: the request, what follows from it, and
// the constants above.
type view struct {
	Kubernetes
	Args                      []string
	Quorum                    int
	TLSCommands               []string
	Binary, DataDir, TLSDir   string
	HTTPPort, RaftPort, RunAs int
	KeyKey                    string
}

// objectMeta is an object's metadata: its name, the namespace and the
// labels every object carries.
type objectMeta struct {
	Name, Namespace, Instance, Version string
}

// Meta is the metadata of the object called name.
func (v view) Meta(name string) objectMeta {
	return objectMeta{Name: name, Namespace: v.Namespace, Instance: v.Name, Version: v.Version}
}

// LabelValue turns a version string into a Kubernetes label value: at most
// 63 characters of letters, digits, '-', '_' and '.', starting and ending
// with a letter or digit. Any other character becomes '-' ("(devel)" is
// "devel", "v1.2.0+dirty" is "v1.2.0-dirty"); nothing left is "unknown".
func LabelValue(v string) string {
	b := []byte(v)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '-'
		}
	}
	isAlnum := func(r rune) bool {
		return r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}
	s := strings.TrimFunc(string(b), func(r rune) bool { return !isAlnum(r) })
	if len(s) > 63 {
		s = strings.TrimRightFunc(s[:63], func(r rune) bool { return !isAlnum(r) })
	}
	if s == "" {
		return "unknown"
	}
	return s
}

// quote writes s as a JSON string, which YAML reads as the same string
// whatever it holds.
func quote(s string) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return "", fmt.Errorf("quote %q: %w", s, err)
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

var manifests = template.Must(template.New("kubernetes").Funcs(template.FuncMap{"q": quote}).Parse(manifestsTemplate))

// manifestsTemplate is the four documents. Every value that comes from a
// flag goes through q; the rest are literals or the constants above.
const manifestsTemplate = `{{define "metadata" -}}
metadata:
  name: {{q .Name}}
  namespace: {{q .Namespace}}
  labels:
    app.kubernetes.io/name: holdfast
    app.kubernetes.io/instance: {{q .Instance}}
    app.kubernetes.io/version: {{q .Version}}
{{- end -}}
# holdfast on Kubernetes{{if .Command}}, made by: {{.Command}}{{end}}
# Before applying: the Secret {{.ClusterKeySecret}} in namespace {{.Namespace}}, with the cluster key under
# the key {{.KeyKey}}{{if .TLSSecret}}, and the Secret {{.TLSSecret}} with the TLS files, which these
# commands make with a CA of holdfast's own in ./tls (the README's "Running on Kubernetes"):
{{- range .TLSCommands}}
#   {{.}}
{{- end}}
{{- else}}.{{end}}
#
# The headless Service gives each member a stable DNS name ({{.Name}}-0.{{.Name}}-peers.{{.Namespace}}.svc.{{.ClusterDomain}}, ...).
# The members must find each other before any is ready, so it lists pods that are not ready.
apiVersion: v1
kind: Service
{{template "metadata" (.Meta (printf "%s-peers" .Name))}}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector:
    app.kubernetes.io/name: holdfast
    app.kubernetes.io/instance: {{q .Name}}
  ports:
  - name: http
    port: {{.HTTPPort}}
    targetPort: http
  - name: raft
    port: {{.RaftPort}}
    targetPort: raft
---
# The client Service: the members that are ready. Every member answers every API call.
apiVersion: v1
kind: Service
{{template "metadata" (.Meta .Name)}}
spec:
  type: ClusterIP
  selector:
    app.kubernetes.io/name: holdfast
    app.kubernetes.io/instance: {{q .Name}}
  ports:
  - name: http
    port: {{.HTTPPort}}
    targetPort: http
---
apiVersion: apps/v1
kind: StatefulSet
{{template "metadata" (.Meta .Name)}}
spec:
  serviceName: {{q (printf "%s-peers" .Name)}}
  replicas: {{.Replicas}}
  # All pods start at once: a new cluster forms once --bootstrap-expect members answer.
  podManagementPolicy: Parallel
  # An update replaces one pod at a time, highest ordinal first, each once the one before is ready.
  updateStrategy:
    type: RollingUpdate
  selector:
    matchLabels:
      app.kubernetes.io/name: holdfast
      app.kubernetes.io/instance: {{q .Name}}
  template:
    metadata:
      labels:
        app.kubernetes.io/name: holdfast
        app.kubernetes.io/instance: {{q .Name}}
        app.kubernetes.io/version: {{q .Version}}
    spec:
      # SIGTERM: a leader hands leadership over, requests in flight finish (--shutdown-timeout=20s).
      terminationGracePeriodSeconds: 30
      # holdfast needs no Kubernetes API token, and reads HOLDFAST_* variables as serve's flags:
      # keep the service link variables (HOLDFAST_SERVICE_HOST, ...) out of its environment.
      automountServiceAccountToken: false
      enableServiceLinks: false
      securityContext:
        runAsNonRoot: true
        runAsUser: {{.RunAs}}
        runAsGroup: {{.RunAs}}
        fsGroup: {{.RunAs}}
        # Change the volume's ownership only when its top directory is not the group's already.
        fsGroupChangePolicy: OnRootMismatch
        seccompProfile:
          type: RuntimeDefault
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            podAffinityTerm:
              topologyKey: kubernetes.io/hostname
              labelSelector:
                matchLabels:
                  app.kubernetes.io/name: holdfast
                  app.kubernetes.io/instance: {{q .Name}}
      containers:
      - name: holdfast
        image: {{q .Image}}
        command: [{{q .Binary}}]
        args:
{{- range .Args}}
        - {{q .}}
{{- end}}
        env:
        - name: POD_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        - name: POD_NAMESPACE
          valueFrom:
            fieldRef:
              fieldPath: metadata.namespace
        - name: HOLDFAST_CLUSTER_KEY
          valueFrom:
            secretKeyRef:
              name: {{q .ClusterKeySecret}}
              key: {{q .KeyKey}}
        ports:
        - name: http
          containerPort: {{.HTTPPort}}
        - name: raft
          containerPort: {{.RaftPort}}
        volumeMounts:
        - name: data
          mountPath: {{q .DataDir}}
{{- if .TLSSecret}}
        - name: tls
          mountPath: {{q .TLSDir}}
          readOnly: true
{{- end}}
        # /healthz answers once the node has opened its data directory; a node whose store is
        # behind its newest snapshot rebuilds it from the snapshot first, which can take minutes
        # for a large state. The startup probe gives that 30 minutes (180 x 10s) before the
        # liveness probe starts counting; a start that takes longer is restarted.
        startupProbe:
          httpGet:
            path: /healthz
            port: http
{{- if .TLSSecret}}
            scheme: HTTPS
{{- end}}
          periodSeconds: 10
          timeoutSeconds: 5
          failureThreshold: 180
        # Ready: a leader is known and this node has applied what it knows to be committed.
        readinessProbe:
          httpGet:
            path: /readyz
            port: http
{{- if .TLSSecret}}
            scheme: HTTPS
{{- end}}
          periodSeconds: 2
          failureThreshold: 3
        livenessProbe:
          httpGet:
            path: /healthz
            port: http
{{- if .TLSSecret}}
            scheme: HTTPS
{{- end}}
          periodSeconds: 10
          timeoutSeconds: 5
          failureThreshold: 6
{{- if or .CPURequest .MemoryRequest .MemoryLimit}}
        resources:
{{- if or .CPURequest .MemoryRequest}}
          requests:
{{- if .CPURequest}}
            cpu: {{q .CPURequest}}
{{- end}}
{{- if .MemoryRequest}}
            memory: {{q .MemoryRequest}}
{{- end}}
{{- end}}
{{- if .MemoryLimit}}
          limits:
            memory: {{q .MemoryLimit}}
{{- end}}
{{- end}}
        securityContext:
          readOnlyRootFilesystem: true
          allowPrivilegeEscalation: false
          capabilities:
            drop: ["ALL"]
{{- if .TLSSecret}}
      volumes:
      - name: tls
        secret:
          secretName: {{q .TLSSecret}}
          # 0440: readable by the node's group (fsGroup), not by others.
          defaultMode: 288
{{- end}}
  # A volume per pod, kept when its pod is deleted or the StatefulSet scaled down. Kubernetes
  # refuses changes to these templates on an existing StatefulSet: --storage and
  # --storage-class apply to a new one.
  volumeClaimTemplates:
  - metadata:
      name: data
      labels:
        app.kubernetes.io/name: holdfast
        app.kubernetes.io/instance: {{q .Name}}
    spec:
      accessModes: ["ReadWriteOnce"]
{{- if .StorageClass}}
      storageClassName: {{q .StorageClass}}
{{- end}}
      resources:
        requests:
          storage: {{q .Storage}}
---
# Voluntary disruptions (a node drain) leave at least a quorum, {{.Quorum}} of {{.Replicas}} members, running.
apiVersion: policy/v1
kind: PodDisruptionBudget
{{template "metadata" (.Meta .Name)}}
spec:
  minAvailable: {{.Quorum}}
  selector:
    matchLabels:
      app.kubernetes.io/name: holdfast
      app.kubernetes.io/instance: {{q .Name}}
`
