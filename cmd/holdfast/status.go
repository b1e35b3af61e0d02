package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/internal/client"
)

// memberProbeTimeout bounds asking one member for its own status when
// `cluster status` prints its table: a member that does not answer in time
// is shown as not answering, as on the status page.
const memberProbeTimeout = 2 * time.Second

// memberView is one row of the status table: a member as the node asked
// lists it, and its own status when it answered.
type memberView struct {
	cluster.Member
	self *cluster.Status // its own status; nil when it did not answer
	err  error           // why it did not answer
}

// statusTable writes the answer of GET /cluster/status as a table for a
// person: one row per member with its role, readiness and applied index as
// it reports them itself (each other member is asked in parallel, with the
// options' TLS files), then a line for each problem seen.
func statusTable(ctx context.Context, o *clientOpts, body []byte, w io.Writer) error {
	var st cluster.Status
	if err := json.Unmarshal(body, &st); err != nil {
		return fmt.Errorf("decode the status: %w", err)
	}
	views := memberViews(ctx, o, &st)
	return writeStatusTable(w, &st, views)
}

// memberViews lists every member of st's configuration (and the node that
// answered, when it is not one of them) with its own status.
func memberViews(ctx context.Context, o *clientOpts, st *cluster.Status) []memberView {
	members := st.Nodes
	if !st.Member {
		members = append(members, cluster.Member{ID: st.NodeID, HTTPAddr: st.HTTPAddr, RaftAddr: st.RaftAddr,
			Level: st.Level, BuildVersion: st.BuildVersion})
	}
	views := make([]memberView, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		v := &views[i]
		v.Member = m
		switch {
		case m.ID == st.NodeID:
			v.self = st
		case m.HTTPAddr == "":
			v.err = errors.New("no HTTP address known for it")
		default:
			wg.Add(1)
			go func() {
				defer wg.Done()
				v.self, v.err = memberStatus(ctx, o, m)
			}()
		}
	}
	wg.Wait()
	return views
}

// memberStatus asks member m for its own status, with the TLS files of o.
func memberStatus(ctx context.Context, o *clientOpts, m cluster.Member) (*cluster.Status, error) {
	cl, err := client.New(o.config([]string{m.HTTPAddr}, min(o.timeout, memberProbeTimeout), ""))
	if err != nil {
		return nil, err
	}
	defer cl.CloseIdle()
	r, err := cl.Do(ctx, client.Request{Method: http.MethodGet, Path: cluster.StatusPath, Once: true})
	if err != nil {
		return nil, err
	}
	if !r.OK() {
		return nil, fmt.Errorf("HTTP %d: %s", r.Status, r.ErrorMessage())
	}
	var st cluster.Status
	if err := json.Unmarshal(r.Body, &st); err != nil {
		return nil, fmt.Errorf("decode its status: %w", err)
	}
	if st.NodeID != m.ID {
		return nil, fmt.Errorf("the node at %s is %s", m.HTTPAddr, st.NodeID)
	}
	return &st, nil
}

// writeStatusTable writes the table of views as st's node sees the
// cluster.
func writeStatusTable(w io.Writer, st *cluster.Status, views []memberView) error {
	leader := "no leader"
	if st.LeaderID != "" {
		leader = "leader " + st.LeaderID
	}
	if _, err := fmt.Fprintf(w, "%s, term %d, active level %d (as %s at %s sees it)\n",
		leader, st.Term, st.ActiveLevel, st.NodeID, st.HTTPAddr); err != nil {
		return fmt.Errorf("write the status: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tROLE\tREADY\tAPPLIED\tLEVEL\tVERSION")
	var notes []string
	for _, v := range views {
		role, ready, applied, level, build := "?", "?", "?", v.Level, v.BuildVersion
		if s := v.self; s != nil {
			role, ready, applied, level, build = s.State, yesNo(s.Ready), strconv.FormatUint(s.AppliedIndex, 10), s.Level, s.BuildVersion
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.ID, orDash(v.HTTPAddr), role, ready, applied, levelText(level), shortVersion(build))
		notes = append(notes, memberNotes(v, st)...)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write the status: %w", err)
	}
	for _, n := range notes {
		if _, err := fmt.Fprintln(w, n); err != nil {
			return fmt.Errorf("write the status: %w", err)
		}
	}
	return nil
}

// memberNotes are the problems a row cannot show: no answer, a storage
// fault, a skewed clock, not a voter, not a member.
func memberNotes(v memberView, asked *cluster.Status) []string {
	var notes []string
	switch {
	case v.err != nil:
		notes = append(notes, fmt.Sprintf("%s: no answer: %s", v.ID, shortReason(v.err)))
	case v.ID == asked.NodeID && !asked.Member && !asked.Formed:
		notes = append(notes, fmt.Sprintf("%s: has not formed or joined a cluster yet", v.ID))
	case v.ID == asked.NodeID && !asked.Member:
		notes = append(notes, fmt.Sprintf("%s: not a member of the cluster it knows (removed, or still joining)", v.ID))
	case !v.Voter:
		notes = append(notes, fmt.Sprintf("%s: not a voter", v.ID))
	}
	if s := v.self; s != nil {
		for _, f := range s.Storage.Faults {
			notes = append(notes, fmt.Sprintf("%s: cannot write its %s: %s", v.ID, f.Kind, f.Error))
		}
		if s.ClockSkewed {
			notes = append(notes, fmt.Sprintf("%s: clock off the cluster's by %d ms: it will not lead", v.ID, s.ClockOffsetMs))
		}
	}
	return notes
}

// shortReason is why a member did not answer, in a few words for the
// usual causes.
func shortReason(err error) string {
	var te interface{ Timeout() bool }
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &te) && te.Timeout():
		return "timed out"
	}
	return err.Error()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// levelText is a member's level, "-" when unknown (a build from before
// cluster levels, or one not heard from).
func levelText(l uint32) string {
	if l == 0 {
		return "-"
	}
	return strconv.FormatUint(uint64(l), 10)
}
