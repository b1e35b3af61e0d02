package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/internal/client"
)

// clusterCommand runs "holdfast cluster <verb>".
func clusterCommand(args []string, stdout, stderr io.Writer) int {
	return dispatch("cluster", []subcommand{
		{"status", "one node's view: its state, the leader, the Raft indexes and the members (a table on a terminal, else JSON)", clusterStatus},
		{"settings", "read the replicated limits, or change some with --set NAME=VALUE (cluster key)", clusterSettings},
		{"join", "add or update a voter (cluster key)", clusterJoin},
		{"remove", "remove a member (cluster key)", clusterRemove},
	}, args, stdout, stderr)
}

// clusterStatus prints a node's status: a table when stdout is a
// terminal, else (and with --json) the node's JSON answer.
func clusterStatus(args []string, stdout, stderr io.Writer) int {
	return clusterStatusTo(args, stdout, stderr, isTerminal(stdout))
}

// clusterStatusTo is clusterStatus with the choice of a terminal made by
// the caller: tty prints the table unless --json or --field is given.
func clusterStatusTo(args []string, stdout, stderr io.Writer, tty bool) int {
	fs := newFlags("cluster status", stderr)
	o := addClientFlags(fs)
	asJSON := fs.Bool("json", false, "print the node's JSON answer, as a pipe or a file gets it, instead of the table a terminal gets")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	c := call{cmd: "cluster status", opts: o, req: client.Request{Method: http.MethodGet, Path: cluster.StatusPath, Repeatable: true}}
	if tty && !*asJSON && o.field == "" {
		c.render = func(body []byte, w io.Writer) error { return statusTable(context.Background(), o, body, w) }
	}
	return c.run(stdout, stderr)
}

// settingList collects repeated --set NAME=VALUE flags.
type settingList map[string]int64

func (s settingList) String() string { return "" }
func (s settingList) Set(v string) error {
	name, val, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return errors.New("want NAME=VALUE")
	}
	n, err := strconv.ParseInt(val, 10, 64)
	if err != nil {
		return fmt.Errorf("%s: the value must be an integer", name)
	}
	s[name] = n
	return nil
}

func clusterSettings(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("cluster settings", stderr)
	o := addClientFlags(fs)
	o.clusterKey = clusterKeyFlag(fs)
	set := settingList{}
	fs.Var(set, "set", "change a limit, e.g. --set queues_per_client=1000 (repeatable; omitted limits keep their values)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	req := client.Request{Method: http.MethodGet, Path: "/cluster/settings", Repeatable: true}
	if len(set) > 0 {
		b, err := marshalBody(set)
		if err != nil {
			return usageError(stderr, "cluster settings", err)
		}
		req = client.Request{Method: http.MethodPut, Path: "/cluster/settings", Body: b, Operator: true}
	}
	return call{cmd: "cluster settings", opts: o, req: req}.run(stdout, stderr)
}

func clusterJoin(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("cluster join", stderr)
	o := addClientFlags(fs)
	o.clusterKey = clusterKeyFlag(fs)
	id := fs.String("node-id", "", "the joining node's id (required)")
	raftAddr := fs.String("raft-addr", "", "its Raft address (required)")
	httpAddr := fs.String("http-addr", "", "its HTTP address (required)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *id == "" || *raftAddr == "" || *httpAddr == "" {
		return usageError(stderr, "cluster join", errors.New("--node-id, --raft-addr and --http-addr are required"))
	}
	b, err := marshalBody(map[string]string{"node_id": *id, "raft_addr": *raftAddr, "http_addr": *httpAddr})
	if err != nil {
		return usageError(stderr, "cluster join", err)
	}
	return call{cmd: "cluster join", opts: o, req: client.Request{Method: http.MethodPost, Path: "/cluster/join", Body: b, Operator: true}}.run(stdout, stderr)
}

func clusterRemove(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("cluster remove", stderr)
	o := addClientFlags(fs)
	o.clusterKey = clusterKeyFlag(fs)
	id := fs.String("node-id", "", "the member to remove (required)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *id == "" {
		return usageError(stderr, "cluster remove", errors.New("--node-id is required"))
	}
	b, err := marshalBody(map[string]string{"node_id": *id})
	if err != nil {
		return usageError(stderr, "cluster remove", err)
	}
	return call{cmd: "cluster remove", opts: o, req: client.Request{Method: http.MethodPost, Path: "/cluster/remove", Body: b, Operator: true}}.run(stdout, stderr)
}

// clusterKeyFlag registers --cluster-key for the operator calls.
func clusterKeyFlag(fs *flag.FlagSet) *secretValue {
	return secretFlag(fs, "cluster-key", "HOLDFAST_CLUSTER_KEY", "the cluster key (operator calls; without one a node accepts them from loopback)")
}
