//go:build unix

package fault

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// Kinds of storage damage the storage nemesis does to a stopped node.
const (
	// damageFlip inverts one byte inside the newest segment's records.
	damageFlip = "flip"
	// damageZero zeroes a few bytes inside the newest segment's records,
	// before its last record, so written records follow the damage.
	damageZero = "zero"
	// damageTorn writes what a crash in the middle of an append leaves
	// past the last record: a record header and the payload up to a sector
	// boundary, the rest of the record still zero. Nothing in it was ever
	// acknowledged.
	damageTorn = "torn"
	// damageSnapshot flips or zeroes bytes of the newest snapshot's state.
	damageSnapshot = "snapshot"
)

// damage is what the storage nemesis did to one node's files.
type damage struct {
	kind string
	desc string
	// file names the damaged file or snapshot as the node's refusal must
	// name it.
	file string
	// refuse: the node must refuse to start (a damaged record); start: it
	// must start (a torn append). A damaged snapshot may do either, as long
	// as a refusal names it.
	refuse, start bool
	// sum is the SHA-256 of the damaged segment, which a refusal must leave
	// as it is ("" for a snapshot).
	sum string
}

// storage stops one member (SIGKILL or SIGTERM), damages its newest log
// segment or snapshot, and starts it again. A node that refuses to start
// over damage it must refuse is brought back the operator's way: removed
// from the configuration, its data wiped, started again with --join. A
// node that starts with a damaged record, refuses a torn append, or exits
// without naming the damage is a failure. Healing waits until the node
// holds the log up to the leader's commit index, so the next fault never
// meets it still short of committed entries.
func (nm *nemesis) storage() *fault {
	r := nm.r
	members := nm.runningMembers()
	if len(members) == 0 {
		return nil
	}
	n := members[0]
	how, halt := "kill", r.killNode
	if nm.rng.IntN(2) == 0 {
		how, halt = "stop", r.stopNode
	}
	if err := halt(n); err != nil {
		r.problem("%s %s for the storage fault: %v", how, n.ID, err)
		if !n.Alive() {
			_ = r.startNode(n)
		}
		return nil
	}
	d, err := damageFiles(nm.rng, n.DataDir)
	if err != nil {
		r.problem("damage the storage of %s: %v", n.ID, err)
		if err := r.startNode(n); err != nil {
			r.problem("restart %s: %v", n.ID, err)
		}
		return nil
	}
	r.rec.Note("storage", fmt.Sprintf("%s %s, then %s", how, n.ID, d.desc))
	if err := r.startNode(n); err != nil {
		r.problem("start %s after the storage fault: %v", n.ID, err)
		return nil
	}
	desc := fmt.Sprintf("%s %s, %s", how, n.ID, d.desc)
	if refused := nm.judgeStart(n, d); refused {
		desc += "; refused to start, removed, wiped and joined again"
		r.net.SetDown(n.ID, true)
		ctx := context.Background() // runs to completion, like membership changes
		if err := nm.removeVoter(ctx, n); err != nil {
			r.problem("remove %s after it refused to start: %v", n.ID, err)
		} else if err := nm.addVoter(ctx, n); err != nil {
			r.problem("join %s again after wiping it: %v", n.ID, err)
		}
	}
	return &fault{
		desc: desc,
		hold: between(nm.rng, time.Second, 2*time.Second),
		heal: func() {
			if err := nm.awaitCaughtUp(n); err != nil {
				r.problem("storage: after the storage fault, %v", err)
			}
		},
	}
}

// judgeStart waits until the restarted node serves or exits, reports what
// the damage forbids, and returns whether the node refused to start.
func (nm *nemesis) judgeStart(n *harness.Node, d damage) bool {
	r := nm.r
	err := poll(context.Background(), 30*time.Second, 200*time.Millisecond, func() error {
		if !n.Alive() {
			return nil
		}
		_, err := r.status(n, false)
		return err
	})
	if err != nil {
		r.problem("storage: %s neither served nor exited within 30 s of starting after %s: %v", n.ID, d.desc, err)
		return false
	}
	if n.Alive() {
		switch {
		case d.refuse:
			r.problem("storage: %s started after %s; it must refuse a damaged record", n.ID, d.desc)
		case d.start && !harness.TornAppendLog.MatchString(n.LogSinceStart()):
			r.problem("storage: %s started after %s without logging that it cut off the torn record", n.ID, d.desc)
		}
		return false
	}
	code, state := n.Exit()
	line := harness.ServeFailedLine.FindString(n.LogSinceStart())
	named := strings.Contains(line, d.file) && (d.kind == damageSnapshot || strings.Contains(line, "corrupt"))
	switch {
	case d.start:
		r.problem("storage: %s refused to start after %s, which it must cut off (%s): %q", n.ID, d.desc, state, line)
	case code == 0:
		r.problem("storage: %s exited with status 0 after %s", n.ID, d.desc)
	case !named:
		r.problem("storage: %s exited (%s) after %s without naming %s in a refusal; log tail:\n%s", n.ID, state, d.desc, d.file, lastLines(n.LogSinceStart(), 15))
	}
	if d.sum != "" {
		if sum, err := harness.FileSHA256(d.file); err != nil || sum != d.sum {
			r.problem("storage: %s changed the damaged %s while refusing to start (%v)", n.ID, d.file, err)
		}
	}
	return true
}

// awaitCaughtUp waits until n runs and either leads or knows a leader and
// holds the log up to the commit index that leader had when first asked.
func (nm *nemesis) awaitCaughtUp(n *harness.Node) error {
	r := nm.r
	var last uint64
	err := poll(context.Background(), 60*time.Second, 300*time.Millisecond, func() error {
		if !n.Alive() {
			return fmt.Errorf("%w: %s exited (%s)", harness.ErrPermanent, n.ID, exitState(n))
		}
		if last == 0 {
			l := r.leader()
			switch l {
			case nil:
				return fmt.Errorf("no leader")
			case n:
				return nil // a leader holds every committed entry
			}
			ls, err := r.status(l, false)
			if err != nil {
				return err
			}
			last = ls.CommitIndex
		}
		s, err := r.status(n, false)
		if err != nil {
			return err
		}
		if s.LeaderID == "" || s.LastLogIndex < last {
			return fmt.Errorf("%s: leader %q, last log index %d of %d", n.ID, s.LeaderID, s.LastLogIndex, last)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s did not catch up: %w; log tail:\n%s", n.ID, err, lastLines(n.LogSinceStart(), 15))
	}
	return nil
}

func exitState(n *harness.Node) string {
	_, s := n.Exit()
	return s
}

// lastLines returns the last k lines of s.
func lastLines(s string, k int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-k):], "\n")
}

// damageFiles damages a stopped node's newest segment or snapshot: a flip
// or zeroed bytes inside the written records (two in five), a torn append
// (one in five) or damaged snapshot state (two in five, when there is a
// snapshot).
func damageFiles(rng *rand.Rand, dataDir string) (damage, error) {
	kinds := []string{damageFlip, damageZero, damageTorn}
	if rng.IntN(5) >= 3 {
		snap, err := harness.NewestSnapshot(dataDir)
		if err != nil {
			return damage{}, err
		}
		if snap != "" {
			return damageSnapshotState(rng, snap)
		}
	}
	return damageLog(rng, dataDir, kinds[rng.IntN(len(kinds))])
}

// damageLog damages the newest segment: kind is damageFlip, damageZero or
// damageTorn (a flip when the segment has no room for a torn append).
func damageLog(rng *rand.Rand, dataDir, kind string) (damage, error) {
	if kind == damageTorn {
		d, err := tearAppend(rng, dataDir)
		if !errors.Is(err, errNoRoom) {
			return d, err
		}
		kind = damageFlip
	}
	seg, err := harness.NewestSegment(dataDir)
	if err != nil {
		return damage{}, err
	}
	last := seg.Records[len(seg.Records)-1]
	d := damage{kind: damageFlip, file: seg.Path, refuse: true}
	from, to := rng.Int64N(seg.End()), int64(0)
	if kind == damageZero && last.Offset > 0 {
		// Written records follow the zeros, so they cannot pass for the
		// unwritten end of a torn append.
		from = rng.Int64N(last.Offset)
		to = min(last.Offset, from+1+rng.Int64N(64))
	}
	what, err := zeroOrFlip(seg.Path, from, to)
	if err != nil {
		return damage{}, err
	}
	if d.sum, err = harness.FileSHA256(seg.Path); err != nil {
		return damage{}, err
	}
	if to > 0 && strings.HasPrefix(what, "zeroed") {
		d.kind = damageZero
	}
	rec, _ := seg.RecordAt(from)
	d.desc = fmt.Sprintf("%s of %s (entry %d)", what, filepath.Base(seg.Path), rec.Index)
	return d, nil
}

// zeroOrFlip zeroes [from, to) of path if any of those bytes is not zero
// yet, and otherwise (or with to 0) inverts the byte at from. It describes
// what it did.
func zeroOrFlip(path string, from, to int64) (string, error) {
	if to > from {
		f, err := os.Open(path)
		if err != nil {
			return "", fmt.Errorf("read %s: %w", path, err)
		}
		b := make([]byte, to-from)
		_, err = f.ReadAt(b, from)
		_ = f.Close()
		if err != nil {
			return "", fmt.Errorf("read %s: %w", path, err)
		}
		if !allZero(b) {
			return fmt.Sprintf("zeroed [%d, %d)", from, to), harness.ZeroRange(path, from, to)
		}
	}
	return fmt.Sprintf("flipped the byte at offset %d", from), harness.FlipByte(path, from)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// errNoRoom: the newest segment is too full for a torn append.
var errNoRoom = errors.New("no room for a torn append")

// tearAppend writes a torn append just past the records of the newest
// segment file: a header announcing a record that spans three sectors
// more than was written, and random bytes up to the first sector boundary
// after the header; the rest stays zero, as the file was before.
func tearAppend(rng *rand.Rand, dataDir string) (damage, error) {
	paths, err := harness.Segments(dataDir)
	if err != nil {
		return damage{}, err
	}
	if len(paths) == 0 {
		return damage{}, fmt.Errorf("no segment in %s", dataDir)
	}
	seg, err := harness.ReadSegment(paths[len(paths)-1])
	if err != nil {
		return damage{}, err
	}
	start := seg.End()
	boundary := (start+harness.RecordHeaderSize)/harness.SectorSize*harness.SectorSize + harness.SectorSize
	length := boundary - start - harness.RecordHeaderSize + 3*harness.SectorSize
	if start+harness.RecordHeaderSize+length > seg.Size {
		return damage{}, fmt.Errorf("%w: segment %s after offset %d", errNoRoom, seg.Path, start)
	}
	b := make([]byte, boundary-start)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	binary.LittleEndian.PutUint32(b, uint32(length))
	if err := harness.WriteAt(seg.Path, start, b); err != nil {
		return damage{}, err
	}
	return damage{kind: damageTorn, file: seg.Path, start: true,
		desc: fmt.Sprintf("a torn append at offset %d of %s (%d of its %d bytes written)", start, filepath.Base(seg.Path), len(b), harness.RecordHeaderSize+length)}, nil
}

// damageSnapshotState flips one byte of the snapshot's state, or zeroes
// up to 64 bytes of it.
func damageSnapshotState(rng *rand.Rand, dir string) (damage, error) {
	state := filepath.Join(dir, "state.bin")
	fi, err := os.Stat(state)
	if err != nil {
		return damage{}, fmt.Errorf("damage snapshot: %w", err)
	}
	if fi.Size() == 0 {
		return damage{}, fmt.Errorf("snapshot state %s is empty", state)
	}
	from, to := rng.Int64N(fi.Size()), int64(0)
	if rng.IntN(2) == 0 {
		to = min(fi.Size(), from+1+rng.Int64N(64))
	}
	what, err := zeroOrFlip(state, from, to)
	if err != nil {
		return damage{}, err
	}
	name := filepath.Base(dir)
	return damage{kind: damageSnapshot, file: name, desc: fmt.Sprintf("%s of the state of snapshot %s", what, name)}, nil
}
