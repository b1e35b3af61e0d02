package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/jsonenc"
	"github.com/holdfast/holdfast/internal/secret"
	"github.com/holdfast/holdfast/internal/wire"
)

// leaderOp is one API operation as the node a client called hands it to the
// leader. That node has checked every rule that does not depend on the
// replicated settings, generated every random value and hashed every secret,
// so the command carries no raw secret; the leader judges what depends on its
// applied settings (ttl and visibility defaults and ranges, payload and
// result sizes), checks the queue's token early, stamps its clock and
// proposes — or, for a read, reads linearizably.
type leaderOp struct {
	// cmd is the command of a write; the leader sets its Now and the fields
	// the settings decide.
	cmd fsm.Command
	// ttl is the ttl_seconds asked for (LeaseAcquire, LeaseRenew), and
	// visibility the visibility_timeout (JobClaim, JobRenew); nil asks for the
	// default.
	ttl, visibility *int64
	// read is set for a linearizable read of a queue or one of its jobs.
	read *queueRead
	// wait is how long a claim or an acquire may wait for a job or for the
	// lease, or a job read for the job's outcome (0: answer at once).
	wait time.Duration
}

// queueRead names what a read asks for.
type queueRead struct {
	queue secret.ID
	token secret.Hash
	job   secret.ID
	// withJob reads the job rather than the queue's counts.
	withJob bool
}

// opResult is the leader's answer to a leaderOp: a state machine result, or
// the error that refuses it (a broken limit, no leader, outcome unknown).
type opResult struct {
	lease   *fsm.LeaseResult
	queue   *fsm.QueueResult
	refusal *Error
}

func refused(e *Error) opResult { return opResult{refusal: e} }

// leadFor runs op on the leader and picks its result of the kind named
// what; a refusal is the error, and a result of another kind is the
// leader's fault.
func leadFor[T any](s *Service, ctx context.Context, op *leaderOp, what string, pick func(opResult) *T) (*T, *Error) {
	res := s.lead(ctx, op)
	if res.refusal != nil {
		return nil, res.refusal
	}
	if r := pick(res); r != nil {
		return r, nil
	}
	return nil, Fail(KindInternal, "the leader answered a "+what+" operation with another result", nil)
}

// execute runs op on this node, which must be the ready leader.
func (s *Service) execute(ctx context.Context, op *leaderOp) opResult {
	if op.read != nil {
		if op.wait > 0 && op.read.withJob {
			return s.awaitJob(ctx, op.wait, op.read)
		}
		return s.executeRead(ctx, op.read)
	}
	if bad := s.prepare(op); bad != nil {
		return opResult{refusal: bad}
	}
	if op.wait > 0 {
		switch c := op.cmd.(type) {
		case *fsm.JobClaim:
			return s.waitClaim(ctx, op.wait, c)
		case *fsm.LeaseAcquire:
			return s.waitAcquire(ctx, op.wait, c)
		}
	}
	return s.proposeWithHandover(ctx, op.cmd)
}

// prepare judges op's command against the applied settings and the
// queue's token, and stamps it with the leader's clock.
func (s *Service) prepare(op *leaderOp) *Error {
	st := s.node.FSM().Settings()
	now := s.node.Now()
	switch c := op.cmd.(type) {
	case *fsm.LeaseAcquire:
		ttl, bad := ttlSeconds(op.ttl, st)
		if bad != nil {
			return bad
		}
		if bad := s.diskRoom(func() bool { return !s.node.FSM().HasLease(c.Lease) }); bad != nil {
			return bad
		}
		c.Now, c.TTLSeconds = now, ttl
	case *fsm.LeaseRenew:
		ttl, bad := ttlSeconds(op.ttl, st)
		if bad != nil {
			return bad
		}
		c.Now, c.TTLSeconds = now, ttl
	case *fsm.LeaseRelease:
		c.Now = now
	case *fsm.LeaseComplete:
		if int64(len(c.Result)) > st.MaxResultBytes {
			return TooLarge("result", fmt.Sprintf("must be at most %d bytes as canonical JSON after redaction (got %d)", st.MaxResultBytes, len(c.Result)))
		}
		c.Now = now
	case *fsm.LeaseCheckpoint:
		if int64(len(c.Checkpoint)) > st.MaxResultBytes {
			return TooLarge("checkpoint", fmt.Sprintf("must be at most %d bytes as canonical JSON after redaction (got %d)", st.MaxResultBytes, len(c.Checkpoint)))
		}
		c.Now = now
	case *fsm.QueueCreate:
		if bad := s.diskRoom(nil); bad != nil {
			return bad
		}
		c.Now = now
	case *fsm.JobEnqueue:
		if int64(len(c.Payload)) > st.MaxPayloadBytes {
			return TooLarge("payload", fmt.Sprintf("must be at most %d bytes encoded (got %d)", st.MaxPayloadBytes, len(c.Payload)))
		}
		if r := s.preauthorize(QueueAuth{c.Queue, c.Token}, fsm.RoleWrite); r != nil {
			return r
		}
		if bad := s.diskRoom(func() bool { return !s.node.FSM().HasJobKey(c.Queue, c.Key) }); bad != nil {
			return bad
		}
		c.Now = now
	case *fsm.JobClaim:
		vis, bad := visibilitySeconds(op.visibility, st)
		if bad != nil {
			return bad
		}
		if r := s.preauthorize(QueueAuth{c.Queue, c.Token}, fsm.RoleWorker); r != nil {
			return r
		}
		c.Now, c.VisibilitySeconds = now, vis
	case *fsm.JobAck:
		if r := s.preauthorize(QueueAuth{c.Queue, c.Token}, fsm.RoleWorker); r != nil {
			return r
		}
		c.Now = now
	case *fsm.JobRelease:
		if r := s.preauthorize(QueueAuth{c.Queue, c.Token}, fsm.RoleWorker); r != nil {
			return r
		}
		c.Now = now
	case *fsm.JobRetry:
		if r := s.preauthorize(QueueAuth{c.Queue, c.Token}, fsm.RoleWrite); r != nil {
			return r
		}
		c.Now = now
	case *fsm.JobRenew:
		if r := s.preauthorize(QueueAuth{c.Queue, c.Token}, fsm.RoleWorker); r != nil {
			return r
		}
		vis, bad := visibilitySeconds(op.visibility, st)
		if bad != nil {
			return bad
		}
		c.Now, c.VisibilitySeconds = now, vis
	default:
		return Fail(KindInvalid, fmt.Sprintf("command type %d is not an API operation", op.cmd.Type()), nil)
	}
	return nil
}

// diskRoom refuses a command that would add a record (isNew, when given,
// says whether it would) while the leader's data directory has less free
// space than its floor: the log and the state store keep room for the
// keys, queues and jobs that exist, which go on working.
func (s *Service) diskRoom(isNew func() bool) *Error {
	free, floor, low := s.node.DiskLow()
	if !low || isNew != nil && !isNew() {
		return nil
	}
	return Fail(KindStorageFull,
		fmt.Sprintf("the leader's data directory has %d bytes free, below its floor of %d (holdfast serve --min-free-disk): new keys, queues and jobs are refused until there is room; those that exist work as before", free, floor),
		jsonenc.H{"status": "disk_low", "setting": "min_free_disk", "free_bytes": free, "min_free_bytes": floor, "node_id": s.node.ID()})
}

// propose commits cmd and wakes the waiters of what it changed.
func (s *Service) propose(ctx context.Context, cmd fsm.Command) opResult {
	res, err := s.node.Propose(ctx, cmd)
	if err != nil {
		return refused(ClusterError(err))
	}
	out := typedResult(res)
	s.notifyChange(cmd, out)
	return out
}

// typedResult wraps a state machine result of an API command.
func typedResult(res interface{}) opResult {
	switch r := res.(type) {
	case *fsm.LeaseResult:
		return opResult{lease: r}
	case *fsm.QueueResult:
		return opResult{queue: r}
	}
	return refused(Fail(KindInternal, fmt.Sprintf("unexpected state machine result %T", res), nil))
}

func (s *Service) executeRead(ctx context.Context, q *queueRead) opResult {
	var r fsm.QueueResult
	if err := s.node.ReadLinearizable(ctx, func() { r = s.executeStaleRead(q) }); err != nil {
		return refused(ClusterError(err))
	}
	return opResult{queue: &r}
}

// executeStaleRead reads this node's own state.
func (s *Service) executeStaleRead(q *queueRead) fsm.QueueResult {
	if q.withJob {
		return s.node.FSM().ReadJob(q.queue, q.token, q.job, s.node.Now())
	}
	return s.node.FSM().ReadQueue(q.queue, q.token, s.node.Now())
}

// Wire layout of leaderOps and opResults on the peer link. A version byte
// leads each, so a mixed-version cluster refuses what it cannot read.
const (
	opWireVersion = 2

	opWrite   = 1
	opRead    = 2
	opReadJob = 3

	resultLease   = 1
	resultQueue   = 2
	resultRefusal = 3
	// resultLeaseExt (cluster level 2) is a lease result followed by the
	// key's slots, how many are held and the checkpoint; written only for a
	// result that has any of them, which only a state at level 2 gives.
	resultLeaseExt = 4
)

// errOpWire is wrapped by every error decoding an op or a result.
var errOpWire = errors.New("malformed leader operation")

func encodeOptInt(e *wire.Encoder, v *int64) {
	e.Bool(v != nil)
	if v != nil {
		e.Varint(*v)
	}
}

func decodeOptInt(d *wire.Decoder) *int64 {
	if !d.Bool() {
		return nil
	}
	v := d.Varint()
	return &v
}

// encode appends op's wire form to buf.
func (op *leaderOp) encode(buf []byte) []byte {
	room := opFixedRoom
	if op.read == nil {
		room += fsm.SizeHint(op.cmd)
	}
	e := wire.NewEncoder(slices.Grow(buf, room))
	e.Byte(opWireVersion)
	switch {
	case op.read != nil && op.read.withJob:
		e.Byte(opReadJob)
		e.Fixed(op.read.queue[:])
		e.Fixed(op.read.token[:])
		e.Fixed(op.read.job[:])
	case op.read != nil:
		e.Byte(opRead)
		e.Fixed(op.read.queue[:])
		e.Fixed(op.read.token[:])
	default:
		e.Byte(opWrite)
		encodeOptInt(e, op.ttl)
		encodeOptInt(e, op.visibility)
		fsm.AppendBlob(e, op.cmd)
	}
	e.Varint(op.wait.Milliseconds())
	return e.Bytes()
}

// decodeOp parses what encode wrote. Only API commands are accepted.
func decodeOp(b []byte) (*leaderOp, error) {
	d := wire.NewDecoder(b)
	if v := d.Byte(); v != opWireVersion {
		return nil, fmt.Errorf("%w: version %d", errOpWire, v)
	}
	op := &leaderOp{}
	switch kind := d.Byte(); kind {
	case opRead, opReadJob:
		q := &queueRead{withJob: kind == opReadJob}
		d.Fixed(q.queue[:])
		d.Fixed(q.token[:])
		if q.withJob {
			d.Fixed(q.job[:])
		}
		op.read = q
	case opWrite:
		op.ttl = decodeOptInt(d)
		op.visibility = decodeOptInt(d)
		raw := d.BlobView() // Decode copies what the command keeps
		if d.Err() != nil {
			break
		}
		cmd, err := fsm.Decode(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errOpWire, err)
		}
		if !apiCommand(cmd) {
			return nil, fmt.Errorf("%w: command type %d is not an API operation", errOpWire, cmd.Type())
		}
		op.cmd = cmd
	default:
		d.Fail(fmt.Sprintf("unknown operation kind %d", kind))
	}
	op.wait = time.Duration(d.Varint()) * time.Millisecond
	if op.wait < 0 || op.wait > MaxAcquireWaitSeconds*time.Second {
		d.Fail("wait out of range")
	}
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("%w: %w", errOpWire, err)
	}
	return op, nil
}

// apiCommand reports whether cmd is one a client's request can make.
func apiCommand(cmd fsm.Command) bool {
	switch cmd.(type) {
	case *fsm.LeaseAcquire, *fsm.LeaseRenew, *fsm.LeaseRelease, *fsm.LeaseComplete, *fsm.LeaseCheckpoint,
		*fsm.QueueCreate, *fsm.JobEnqueue, *fsm.JobClaim, *fsm.JobAck, *fsm.JobRelease, *fsm.JobRenew, *fsm.JobRetry:
		return true
	}
	return false
}

// opFixedRoom is more than the fixed-size fields of an operation or of a
// result take on the wire; encoders reserve it (plus any variable-size
// field) so that encoding allocates once.
const opFixedRoom = 128

// encode appends the result's wire form to buf.
func (r opResult) encode(buf []byte) ([]byte, error) {
	room := opFixedRoom
	switch {
	case r.lease != nil:
		room += len(r.lease.Result)
		if cp := r.lease.Checkpoint; cp != nil {
			room += len(cp.Value)
		}
	case r.queue != nil && r.queue.Job != nil:
		room += opFixedRoom + len(r.queue.Job.Key) + len(r.queue.Job.Payload)
	}
	e := wire.NewEncoder(slices.Grow(buf, room))
	e.Byte(opWireVersion)
	switch {
	case r.refusal != nil:
		body, err := r.refusal.Body()
		if err != nil {
			return nil, err
		}
		e.Byte(resultRefusal)
		e.Varint(int64(linkCode(r.refusal.Kind)))
		e.Varint(int64(r.refusal.RetryAfter))
		e.Bool(r.refusal.Challenge)
		e.Blob(body)
	case r.lease != nil:
		l := r.lease
		ext := l.Slots > 0 || l.Checkpoint != nil
		if ext {
			e.Byte(resultLeaseExt)
		} else {
			e.Byte(resultLease)
		}
		e.Byte(byte(l.Outcome))
		e.Varint(l.Now)
		e.Uvarint(l.FencingToken)
		for _, v := range []int64{l.TTLSeconds, l.LeaseExpiresAt, l.AbsoluteExpiresAt, l.RetryAfterSeconds, l.CompletedAt} {
			e.Varint(v)
		}
		e.Blob(l.Result)
		if l.Outcome == fsm.LeaseLimitReached {
			e.Varint(l.Limit) // only with the outcome that has one, so other results keep their bytes
		}
		if ext {
			e.Uvarint(uint64(l.Slots))
			e.Uvarint(uint64(l.Held))
			e.Bool(l.Checkpoint != nil)
			if cp := l.Checkpoint; cp != nil {
				e.Blob(cp.Value)
				e.Uvarint(cp.Fence)
				e.Varint(cp.At)
			}
		}
	case r.queue != nil:
		q := r.queue
		e.Byte(resultQueue)
		e.Byte(byte(q.Outcome))
		e.Varint(q.Now)
		e.Fixed(q.Queue.ID[:])
		for _, v := range []int64{q.Queue.CreatedAt, q.Queue.ExpiresAt} {
			e.Varint(v)
		}
		c := q.Queue.Counts
		for _, v := range []int{c.Pending, c.Claimed, c.Completed, c.Failed, c.Total} {
			e.Varint(int64(v))
		}
		e.Bool(q.Job != nil)
		if j := q.Job; j != nil {
			e.Fixed(j.ID[:])
			e.String(j.Key)
			e.Blob(j.Payload)
			e.Byte(byte(j.Status))
			for _, v := range []int64{j.Attempts, j.CreatedAt, j.UpdatedAt, j.VisibleAt, j.AvailableAt, j.CompletedAt, j.QueueExpiresAt} {
				e.Varint(v)
			}
		}
		e.Byte(byte(q.Reason))
		e.Varint(q.RetryAfterSeconds)
		if q.Outcome == fsm.QueueLimitReached {
			e.Varint(q.Limit)
		}
	default:
		return nil, errors.New("encode an empty leader result")
	}
	return e.Bytes(), nil
}

// decodeResult parses what opResult.encode wrote.
func decodeResult(b []byte) (opResult, error) {
	d := wire.NewDecoder(b)
	if v := d.Byte(); v != opWireVersion {
		return opResult{}, fmt.Errorf("%w: result version %d", errOpWire, v)
	}
	var r opResult
	switch kind := d.Byte(); kind {
	case resultRefusal:
		code := int(d.Varint())
		ref := &Error{RetryAfter: int(d.Varint()), Challenge: d.Bool(), body: d.Blob()}
		if ref.Kind = kindOfLinkCode(code, ref.body); ref.Kind == 0 || len(ref.body) == 0 {
			d.Fail("invalid refusal")
		}
		r.refusal = ref
	case resultLease, resultLeaseExt:
		l := &fsm.LeaseResult{Outcome: fsm.LeaseOutcome(d.Byte()), Now: d.Varint(), FencingToken: d.Uvarint()}
		for _, p := range []*int64{&l.TTLSeconds, &l.LeaseExpiresAt, &l.AbsoluteExpiresAt, &l.RetryAfterSeconds, &l.CompletedAt} {
			*p = d.Varint()
		}
		l.Result = d.Blob()
		if l.Outcome == fsm.LeaseLimitReached {
			l.Limit = d.Varint()
		}
		if kind == resultLeaseExt {
			slots, held := d.Uvarint(), d.Uvarint()
			if slots > fsm.MaxSlots || held > max(slots, 1) {
				d.Fail("lease slots out of range")
			}
			l.Slots, l.Held = uint32(slots), uint32(held)
			if d.Bool() {
				l.Checkpoint = &fsm.Checkpoint{Value: d.Blob(), Fence: d.Uvarint(), At: d.Varint()}
			}
		}
		r.lease = l
	case resultQueue:
		q := &fsm.QueueResult{Outcome: fsm.QueueOutcome(d.Byte()), Now: d.Varint()}
		d.Fixed(q.Queue.ID[:])
		q.Queue.CreatedAt, q.Queue.ExpiresAt = d.Varint(), d.Varint()
		c := &q.Queue.Counts
		for _, p := range []*int{&c.Pending, &c.Claimed, &c.Completed, &c.Failed, &c.Total} {
			*p = int(d.Varint())
		}
		if d.Bool() {
			j := &fsm.JobView{}
			d.Fixed(j.ID[:])
			j.Key = d.String()
			j.Payload = d.Blob()
			j.Status = fsm.JobStatus(d.Byte())
			for _, p := range []*int64{&j.Attempts, &j.CreatedAt, &j.UpdatedAt, &j.VisibleAt, &j.AvailableAt, &j.CompletedAt, &j.QueueExpiresAt} {
				*p = d.Varint()
			}
			q.Job = j
		}
		q.Reason = fsm.RejectReason(d.Byte())
		q.RetryAfterSeconds = d.Varint()
		if q.Outcome == fsm.QueueLimitReached {
			q.Limit = d.Varint()
		}
		r.queue = q
	default:
		d.Fail(fmt.Sprintf("unknown result kind %d", kind))
	}
	if err := d.Finish(); err != nil {
		return opResult{}, fmt.Errorf("%w: %w", errOpWire, err)
	}
	return r, nil
}
