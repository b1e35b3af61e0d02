package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/holdfast/holdfast/internal/deploy"
)

// deployCommand runs "holdfast deploy <target>".
func deployCommand(args []string, stdout, stderr io.Writer) int {
	return dispatch("deploy", []subcommand{
		{"kubernetes", "print Kubernetes manifests for a cluster of 3 or 5 nodes (kubectl apply -f them)", deployKubernetes},
	}, args, stdout, stderr)
}

const deployKubernetesUsage = `Usage: holdfast deploy kubernetes --image IMAGE [flags] > holdfast.yaml

Prints on stdout the Kubernetes manifests of a holdfast cluster: the
headless Service NAME-peers, through which the members find each other, the
client Service NAME (port 7070), the StatefulSet NAME of --replicas nodes,
each with a volume of --storage, and a PodDisruptionBudget that keeps a
majority of them running. It talks to no cluster: apply the output with
"kubectl apply -f holdfast.yaml".

IMAGE must hold holdfast at /usr/local/bin/holdfast; the pods run it as
user and group 65532 with a read-only root file system. Before applying,
create the Secret --cluster-key-secret in --namespace, holding the cluster
key under the key cluster-key:

  kubectl create secret generic holdfast-cluster-key --from-literal=cluster-key=$(openssl rand -hex 32)

With --tls-secret S the nodes serve HTTPS and authenticate each other:
Secret S holds ca.crt, api.crt, api.key and, for each pod (NAME-0, NAME-1,
...), NAME-i.crt and NAME-i.key. The README's "Running on Kubernetes" has
the commands that make them, and how to scale, upgrade and back up.

Flags:
`

// deployKubernetes runs "holdfast deploy kubernetes".
func deployKubernetes(args []string, stdout, stderr io.Writer) int {
	const name = "deploy kubernetes"
	fs := newFlags(name, stderr)
	var k deploy.Kubernetes
	fs.StringVar(&k.Name, "name", "holdfast", "name of the StatefulSet, the client Service and the PodDisruptionBudget; the headless Service is NAME-peers, the pods NAME-0, NAME-1, ...")
	fs.StringVar(&k.Namespace, "namespace", "default", "namespace of every object")
	fs.IntVar(&k.Replicas, "replicas", 3, "number of nodes: 3 or 5")
	fs.StringVar(&k.Image, "image", "", "container image with holdfast at /usr/local/bin/holdfast (required)")
	fs.StringVar(&k.Storage, "storage", "10Gi", "size of each pod's volume (a Kubernetes quantity)")
	fs.StringVar(&k.StorageClass, "storage-class", "", "StorageClass of the volumes (default: the cluster's default class)")
	fs.StringVar(&k.TLSSecret, "tls-secret", "", "Secret with the TLS files, mounted at /etc/holdfast/tls (default: no TLS)")
	fs.StringVar(&k.ClusterKeySecret, "cluster-key-secret", "", "Secret whose key cluster-key holds the cluster key (default NAME-cluster-key)")
	fs.StringVar(&k.ClusterDomain, "cluster-domain", "cluster.local", "the cluster's DNS domain")
	fs.StringVar(&k.CPURequest, "cpu-request", "250m", "CPU each pod requests (\"\" for none); no CPU limit is set, since throttling delays Raft's heartbeats")
	fs.StringVar(&k.MemoryRequest, "memory-request", "512Mi", "memory each pod requests (\"\" for none)")
	fs.StringVar(&k.MemoryLimit, "memory-limit", "", "memory limit of each pod (default: none); a node above it is killed")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), deployKubernetesUsage)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	k.Version = deployVersion()
	k.Command = deployCommandLine(fs)
	if err := k.Validate(); err != nil {
		var fe *deploy.FlagError
		if errors.As(err, &fe) {
			fmt.Fprintf(stderr, "holdfast %s: %v\n(holdfast %s -h lists the flags)\n", name, err, name)
			return exitUsage
		}
		fmt.Fprintf(stderr, "holdfast %s: %v\n", name, err)
		return exitFailed
	}
	if err := k.Render(stdout); err != nil {
		fmt.Fprintf(stderr, "holdfast %s: %v\n", name, err)
		return exitFailed
	}
	return exitOK
}

// deployVersion is the binary's version as a label value: the module
// version, or for a build from a checkout "devel" and the commit.
func deployVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return deploy.LabelValue("")
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v += "-" + s.Value[:min(len(s.Value), 12)]
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty {
			v += "-dirty"
		}
	}
	return deploy.LabelValue(v)
}

// deployCommandLine is the command line that makes the same manifests: the
// flags given, in alphabetical order, each value quoted when a shell would
// need it.
func deployCommandLine(fs *flag.FlagSet) string {
	parts := []string{"holdfast", "deploy", "kubernetes"}
	fs.Visit(func(f *flag.Flag) {
		v := f.Value.String()
		if v == "" || strings.ContainsFunc(v, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@", r))
		}) {
			v = strconv.Quote(v)
		}
		parts = append(parts, "--"+f.Name+" "+v)
	})
	return strings.Join(parts, " ")
}
