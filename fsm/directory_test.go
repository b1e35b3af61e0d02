package fsm

import (
	"reflect"
	"testing"
)

func TestNodeDirectory(t *testing.T) {
	h := newHarness(t)
	a := NodeInfo{ID: "a", HTTPAddr: "127.0.0.1:7070", RaftAddr: "127.0.0.1:7071"}
	b := NodeInfo{ID: "b", HTTPAddr: "127.0.0.2:7070", RaftAddr: "127.0.0.2:7071"}
	steps := []struct {
		cmd     Command
		changed bool
		want    []NodeInfo
	}{
		{&SetNode{Now: t0, Node: b}, true, []NodeInfo{b}},
		{&SetNode{Now: t0, Node: a}, true, []NodeInfo{a, b}},
		{&SetNode{Now: t0, Node: a}, false, []NodeInfo{a, b}},
		{&SetNode{Now: t0, Node: NodeInfo{ID: "a", HTTPAddr: "127.0.0.9:7070", RaftAddr: a.RaftAddr}}, true,
			[]NodeInfo{{ID: "a", HTTPAddr: "127.0.0.9:7070", RaftAddr: a.RaftAddr}, b}},
		{&RemoveNode{Now: t0, ID: "b"}, true, []NodeInfo{{ID: "a", HTTPAddr: "127.0.0.9:7070", RaftAddr: a.RaftAddr}}},
		{&RemoveNode{Now: t0, ID: "b"}, false, []NodeInfo{{ID: "a", HTTPAddr: "127.0.0.9:7070", RaftAddr: a.RaftAddr}}},
	}
	for i, s := range steps {
		r := h.apply(s.cmd).(*DirectoryResult)
		if r.Changed != s.changed {
			t.Fatalf("step %d: changed=%v", i, r.Changed)
		}
		if got := h.f.Nodes(); !reflect.DeepEqual(got, s.want) {
			t.Fatalf("step %d: nodes %+v, want %+v", i, got, s.want)
		}
	}
	if n, ok := h.f.Node("a"); !ok || n.HTTPAddr != "127.0.0.9:7070" {
		t.Fatalf("Node(a) = %+v %v", n, ok)
	}
	// The directory survives a snapshot.
	g := snapshotRestore(t, h.f)
	if !reflect.DeepEqual(g.Nodes(), h.f.Nodes()) {
		t.Fatal("directory lost in snapshot")
	}
}
