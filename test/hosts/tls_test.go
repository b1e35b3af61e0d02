//go:build linux

package hosts

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// tlsSecret is the Secret TestHostsTLS asks the manifests to mount.
const tlsSecret = "holdfast-tls"

// TestHostsTLS runs the three-pod StatefulSet of `holdfast deploy
// kubernetes --tls-secret holdfast-tls`: the TLS files are made by the
// built binary with the commands of the manifests' first comment (the same
// as the README's), the Secret they make is the pod's secret volume, and
// the pods must form one cluster (the members find each other through the
// headless Service's name and check each other's certificates), pass
// their HTTPS readiness probes, and serve the README's quick start through
// the client Service over HTTPS with the CA file.
func TestHostsTLS(t *testing.T) {
	requireHosts(t)
	deployArgs := []string{"--tls-secret", tlsSecret}
	w, err := LoadWorkload(context.Background(), env.Binary, 3, deployArgs...)
	if err != nil {
		t.Fatal(err)
	}
	commands := tlsCommands(t, w.YAML)
	dir := t.TempDir()
	secret, name, ns := makeTLSFiles(t, dir, commands)
	vol := slices.IndexFunc(w.StatefulSet.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Secret != nil && v.Secret.SecretName == tlsSecret
	})
	switch {
	case name != tlsSecret || ns != w.Namespace():
		t.Fatalf("the commands create the Secret %s in namespace %s; the manifests mount %s in %s", name, ns, tlsSecret, w.Namespace())
	case vol < 0:
		t.Fatalf("the StatefulSet has no volume of the Secret %s:\n%s", tlsSecret, w.YAML)
	}
	d := NewDeployment(t, Options{Binary: env.Binary, Replicas: 3, DeployArgs: deployArgs,
		Secrets: map[string]map[string][]byte{name: secret}, CAFile: filepath.Join(dir, "tls", "holdfast-ca.pem")})
	if d.scheme != "https" {
		t.Fatalf("the readiness probe of the manifests with --tls-secret is %s, want HTTPS", d.Workload.ReadinessScheme())
	}
	t.Logf("3 hosts in %s; the Secret %s (%d keys, from the commands' --from-file) mounted as its volume; the container's command line: %q",
		d.Net.Subnet, name, len(secret), append(d.Workload.Container().Command, d.Workload.Container().Args...))
	form(t, d)
	checkSecretVolume(t, d, vol)
	if !t.Run("quick start", func(t *testing.T) {
		clusterStatusCLI(t, d)
		quickStart(t, d)
	}) {
		return
	}
	converge(t, d)
}

// tlsCommands returns the commands of the manifests' first comment (its
// lines indented by three spaces after "# ") and checks that the README's
// TLS paragraph gives the same ones.
func tlsCommands(t *testing.T, manifest []byte) []string {
	t.Helper()
	var commands []string
	for _, line := range strings.Split(string(manifest), "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		if c, ok := strings.CutPrefix(line, "#   "); ok {
			commands = append(commands, c)
		}
	}
	if len(commands) < 3 || !strings.HasPrefix(commands[len(commands)-1], "kubectl create secret generic ") {
		t.Fatalf("the manifests' first comment gives no TLS commands ending in kubectl create secret:\n%s", manifest)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	at := strings.Index(text, "**TLS.** `--tls-secret")
	if at < 0 {
		t.Fatal("the README has no TLS paragraph in Running on Kubernetes")
	}
	block, _, _ := strings.Cut(text[at:], "```\n\n")
	_, block, _ = strings.Cut(block, "```sh\n")
	var inReadme []string
	for _, line := range strings.Split(block, "\n") {
		line = strings.ReplaceAll(line, "./holdfast ", "holdfast ")
		if line != "" && !strings.HasPrefix(line, "holdfast deploy kubernetes") {
			inReadme = append(inReadme, line)
		}
	}
	if !slices.Equal(inReadme, commands) {
		t.Errorf("the README's TLS commands differ from the manifests' comment:\nREADME:   %q\nmanifest: %q", inReadme, commands)
	}
	return commands
}

// makeTLSFiles runs the commands in dir with the built binary as holdfast
// and kubectl recording its arguments, and returns the Secret that
// `kubectl create secret generic` would make: each --from-file=KEY=PATH
// read, its name and namespace.
func makeTLSFiles(t *testing.T, dir string, commands []string) (secret map[string][]byte, name, ns string) {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(env.Binary, filepath.Join(bin, "holdfast")); err != nil {
		t.Fatal(err)
	}
	script := "set -e\nkubectl() { printf '%s\\n' \"$@\" > kubectl.args; }\n" + strings.Join(commands, "\n") + "\n"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	began := time.Now()
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "HOME=" + dir}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the TLS commands failed: %v\n%s\n%s", err, script, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "kubectl.args"))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(args) < 4 || !slices.Equal(args[:3], []string{"create", "secret", "generic"}) {
		t.Fatalf("kubectl ran with %q", args)
	}
	name, secret = args[3], map[string][]byte{}
	for i := 4; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--namespace" && i+1 < len(args):
			i++
			ns = args[i]
		case strings.HasPrefix(a, "--from-file="):
			key, path, ok := strings.Cut(strings.TrimPrefix(a, "--from-file="), "=")
			if !ok {
				t.Fatalf("kubectl %s: want KEY=PATH", a)
			}
			if secret[key], err = os.ReadFile(filepath.Join(dir, path)); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("kubectl: an argument the test does not read: %q", a)
		}
	}
	keys := slices.Sorted(maps.Keys(secret))
	t.Logf("the %d TLS commands made the Secret %s in %v: keys %v", len(commands), name, time.Since(began).Round(time.Millisecond), keys)
	return secret, name, ns
}

// checkSecretVolume checks each pod's view of the Secret's volume: every
// key of the Secret at the mount path with the Secret's bytes, the
// volume's defaultMode and the fsGroup as its group.
func checkSecretVolume(t *testing.T, d *Deployment, vol int) {
	t.Helper()
	v := d.Workload.StatefulSet.Spec.Template.Spec.Volumes[vol]
	mount := ""
	for _, m := range d.Workload.Container().VolumeMounts {
		if m.Name == v.Name {
			mount = m.MountPath
		}
	}
	id := mustIdentity(t, d)
	for _, p := range d.Pods {
		root := fmt.Sprintf("/proc/%d/root", p.Pid())
		for key, want := range d.opts.Secrets[v.Secret.SecretName] {
			path := filepath.Join(root, mount, key)
			got, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s's %s: %v (%d bytes, want the Secret's %d)", p.Name, filepath.Join(mount, key), err, len(got), len(want))
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if fi.Mode().Perm() != os.FileMode(*v.Secret.DefaultMode) || id.FSGroup == nil || int64(st.Gid) != *id.FSGroup {
				t.Fatalf("%s's %s: mode %v group %d, want %v and the fsGroup", p.Name, filepath.Join(mount, key), fi.Mode().Perm(), st.Gid, os.FileMode(*v.Secret.DefaultMode))
			}
		}
	}
	t.Logf("every pod sees the Secret's %d keys at %s, mode %v, group %d, mounted read-only",
		len(d.opts.Secrets[v.Secret.SecretName]), mount, os.FileMode(*v.Secret.DefaultMode), *id.FSGroup)
}
