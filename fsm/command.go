package fsm

import (
	"fmt"

	"github.com/holdfast/holdfast/internal/secret"
	"github.com/holdfast/holdfast/internal/wire"
)

// CommandType is the first byte of every log entry. The list is append-only:
// a value, once released, keeps its meaning forever.
type CommandType uint8

// Command types. Never renumber; add new types at the end.
const (
	TypeLeaseAcquire  CommandType = 1
	TypeLeaseRenew    CommandType = 2
	TypeLeaseRelease  CommandType = 3
	TypeLeaseComplete CommandType = 4
	TypeQueueCreate   CommandType = 5
	TypeJobEnqueue    CommandType = 6
	TypeJobClaim      CommandType = 7
	TypeJobAck        CommandType = 8
	TypeJobRelease    CommandType = 9
	TypeJobRenew      CommandType = 10
	TypeSweep         CommandType = 11
	TypeSetSettings   CommandType = 12
	TypeSetNode       CommandType = 13
	TypeRemoveNode    CommandType = 14
	TypeBatch         CommandType = 15
	TypeJobRetry      CommandType = 16
	TypeFenceFloor    CommandType = 17
	TypeSetLevel      CommandType = 18
	// TypeLeaseCheckpoint (cluster level 2) stores a holder's checkpoint.
	TypeLeaseCheckpoint CommandType = 19
)

// bodyVersion is the version byte written after the type byte. Decoders
// accept every version they know; a new body layout gets a new version.
const bodyVersion = 1

// relayout is a command whose body has had more than one layout: it names
// the version it writes, and its decodeBody reads that and every earlier
// one, so entries already in a log keep their meaning.
type relayout interface{ writtenVersion() byte }

// versionOf is the body version c writes.
func versionOf(c Command) byte {
	if r, ok := c.(relayout); ok {
		return r.writtenVersion()
	}
	return bodyVersion
}

// choosesVersion is a command that writes one of several body versions,
// the oldest that holds its values, so that entries whose values an older
// build can read keep their old bytes.
type choosesVersion interface{ newestVersion() byte }

// newestVersion is the newest body version of c's type that this build reads.
func newestVersion(c Command) byte {
	if r, ok := c.(choosesVersion); ok {
		return r.newestVersion()
	}
	return versionOf(c)
}

// Command is a typed entry of the replicated log. Every command carries the
// leader's wall-clock time in milliseconds (Now) and everything else Apply
// needs: pre-generated ids and hashes of every secret.
type Command interface {
	// Type returns the command's type byte.
	Type() CommandType
	// Stamp returns the leader time the command carries, in Unix milliseconds.
	Stamp() int64
	encodeBody(e *wire.Encoder)
	decodeBody(d *wire.Decoder, version byte)
}

// LeaseAcquire asks for the lease identified by Lease.
type LeaseAcquire struct {
	Now         int64
	Lease       secret.Hash // secret.LeaseID(namespace, key)
	Fingerprint secret.Hash // secret.FingerprintHash(namespace, key, fingerprint)
	Owner       secret.Hash // hash of the owner token the leader generated
	TTLSeconds  int64
	// Slots is the number of owners the key may have at once (0 or 1: one).
	// The key's first acquire in its lifecycle fixes it.
	Slots uint32
}

// slotCount is the slot count the acquire asks for.
func (c *LeaseAcquire) slotCount() uint32 { return max(c.Slots, 1) }

// LeaseRenew moves the short expiry of a held lease.
type LeaseRenew struct {
	Now        int64
	Lease      secret.Hash
	Owner      secret.Hash
	TTLSeconds int64
}

// LeaseRelease ends ownership of a held lease.
type LeaseRelease struct {
	Now   int64
	Lease secret.Hash
	Owner secret.Hash
}

// LeaseComplete stores a result and ends ownership.
type LeaseComplete struct {
	Now    int64
	Lease  secret.Hash
	Owner  secret.Hash
	Result []byte // canonical, redacted JSON
}

// QueueCreate creates a queue with three role tokens, of which only hashes travel.
type QueueCreate struct {
	Now         int64
	Queue       secret.ID
	WriteToken  secret.Hash
	WorkerToken secret.Hash
	ReadToken   secret.Hash
	Client      secret.Hash // secret.ClientHash of the creating client's address
}

// JobEnqueue adds a keyed job to a queue.
type JobEnqueue struct {
	Now     int64
	Queue   secret.ID
	Token   secret.Hash // hash of the bearer token presented
	Job     secret.ID   // id to use if the job is new
	Key     string
	Payload []byte // canonical JSON
}

// JobClaim claims the first available job. With ByRequest the receipt was
// derived from the caller's request id: if a job's active claim has this
// receipt, that claim is answered again and nothing changes.
type JobClaim struct {
	Now               int64
	Queue             secret.ID
	Token             secret.Hash
	Receipt           secret.Hash
	VisibilitySeconds int64
	ByRequest         bool
}

// JobAck marks a claimed job completed.
type JobAck struct {
	Now     int64
	Queue   secret.ID
	Token   secret.Hash
	Job     secret.ID
	Receipt secret.Hash
}

// JobRelease returns a claimed job for another attempt. DelaySeconds
// (0 to MaxReleaseDelaySeconds) keeps it from being claimed again for that
// long, never past the queue's deadline.
type JobRelease struct {
	Now          int64
	Queue        secret.ID
	Token        secret.Hash
	Job          secret.ID
	Receipt      secret.Hash
	DelaySeconds int64
}

// JobRetry moves a failed job back to pending with its attempts reset. It
// takes the queue's write token.
type JobRetry struct {
	Now   int64
	Queue secret.ID
	Token secret.Hash
	Job   secret.ID
}

// JobRenew extends a claim's visibility window.
type JobRenew struct {
	Now               int64
	Queue             secret.ID
	Token             secret.Hash
	Job               secret.ID
	Receipt           secret.Hash
	VisibilitySeconds int64
}

// Sweep applies time-based expiry up to Now, doing at most Limit units of work.
type Sweep struct {
	Now   int64
	Limit int64
}

// SetSettings changes the replicated limits named by its patch; the result
// must satisfy Settings.Validate or nothing changes.
type SetSettings struct {
	Now   int64
	Patch SettingsPatch
}

// SetNode records a cluster member's addresses in the node directory.
type SetNode struct {
	Now  int64
	Node NodeInfo
}

// RemoveNode deletes a member from the node directory.
type RemoveNode struct {
	Now int64
	ID  string
}

// Type implements Command.
func (*SetNode) Type() CommandType { return TypeSetNode }

// Type implements Command.
func (*RemoveNode) Type() CommandType { return TypeRemoveNode }

// Stamp implements Command.
func (c *SetNode) Stamp() int64 { return c.Now }

// Stamp implements Command.
func (c *RemoveNode) Stamp() int64 { return c.Now }

func (c *SetNode) encodeBody(e *wire.Encoder) {
	e.Varint(c.Now)
	c.Node.encode(e)
}

func (c *SetNode) decodeBody(d *wire.Decoder, _ byte) {
	c.Now = d.Varint()
	c.Node.decode(d)
}

func (c *RemoveNode) encodeBody(e *wire.Encoder) {
	e.Varint(c.Now)
	e.String(c.ID)
}

func (c *RemoveNode) decodeBody(d *wire.Decoder, _ byte) {
	c.Now = d.Varint()
	c.ID = d.String()
}

// Type implements Command.
func (*LeaseAcquire) Type() CommandType { return TypeLeaseAcquire }

// Type implements Command.
func (*LeaseRenew) Type() CommandType { return TypeLeaseRenew }

// Type implements Command.
func (*LeaseRelease) Type() CommandType { return TypeLeaseRelease }

// Type implements Command.
func (*LeaseComplete) Type() CommandType { return TypeLeaseComplete }

// Type implements Command.
func (*QueueCreate) Type() CommandType { return TypeQueueCreate }

// Type implements Command.
func (*JobEnqueue) Type() CommandType { return TypeJobEnqueue }

// Type implements Command.
func (*JobClaim) Type() CommandType { return TypeJobClaim }

// Type implements Command.
func (*JobAck) Type() CommandType { return TypeJobAck }

// Type implements Command.
func (*JobRelease) Type() CommandType { return TypeJobRelease }

// Type implements Command.
func (*JobRenew) Type() CommandType { return TypeJobRenew }

// Type implements Command.
func (*JobRetry) Type() CommandType { return TypeJobRetry }

// Type implements Command.
func (*Sweep) Type() CommandType { return TypeSweep }

// Type implements Command.
func (*SetSettings) Type() CommandType { return TypeSetSettings }

// Stamp implements Command.
func (c *LeaseAcquire) Stamp() int64 { return c.Now }

// Stamp implements Command.
func (c *LeaseRenew) Stamp() int64 { return c.Now }

// Stamp implements Command.
func (c *LeaseRelease) Stamp() int64 { return c.Now }

// Stamp implements Command.
func (c *LeaseComplete) Stamp() int64 { return c.Now }

// Stamp implements Command.
func (c *QueueCreate) Stamp() int64 { return c.Now }

// Stamp implements Command.
func (c *JobEnqueue) Stamp() int64 { return c.Now }

// Stamp implements Command.
func (c *JobClaim) Stamp() int64 { return c.Now }

// Stamp implements Command.
func (c *JobAck) Stamp() int64 { return c.Now }

// Stamp implements Command.
func (c *JobRelease) Stamp() int64 { return c.Now }

// Stamp implements Command.
func (c *JobRenew) Stamp() int64 { return c.Now }

// Stamp implements Command.
func (c *JobRetry) Stamp() int64 { return c.Now }

// Stamp implements Command.
func (c *Sweep) Stamp() int64 { return c.Now }

// Stamp implements Command.
func (c *SetSettings) Stamp() int64 { return c.Now }

func putHash(e *wire.Encoder, h secret.Hash) { e.Fixed(h[:]) }
func putID(e *wire.Encoder, id secret.ID)    { e.Fixed(id[:]) }
func getHash(d *wire.Decoder) (h secret.Hash) {
	d.Fixed(h[:])
	return h
}
func getID(d *wire.Decoder) (id secret.ID) {
	d.Fixed(id[:])
	return id
}

// newestVersion: version 2 (cluster level 2) added Slots.
func (*LeaseAcquire) newestVersion() byte { return 2 }

// writtenVersion: an acquire of one slot is still written as version 1,
// byte for byte as before slots.
func (c *LeaseAcquire) writtenVersion() byte {
	if c.Slots > 1 {
		return 2
	}
	return 1
}

func (c *LeaseAcquire) encodeBody(e *wire.Encoder) {
	e.Varint(c.Now)
	putHash(e, c.Lease)
	putHash(e, c.Fingerprint)
	putHash(e, c.Owner)
	e.Varint(c.TTLSeconds)
	if c.Slots > 1 {
		e.Uvarint(uint64(c.Slots))
	}
}

func (c *LeaseAcquire) decodeBody(d *wire.Decoder, version byte) {
	c.Now = d.Varint()
	c.Lease = getHash(d)
	c.Fingerprint = getHash(d)
	c.Owner = getHash(d)
	c.TTLSeconds = d.Varint()
	if version >= 2 {
		if n := d.Uvarint(); n >= 2 && n <= MaxSlots {
			c.Slots = uint32(n)
		} else {
			d.Fail("slots out of range")
		}
	}
}

func (c *LeaseRenew) encodeBody(e *wire.Encoder) {
	e.Varint(c.Now)
	putHash(e, c.Lease)
	putHash(e, c.Owner)
	e.Varint(c.TTLSeconds)
}

func (c *LeaseRenew) decodeBody(d *wire.Decoder, _ byte) {
	c.Now = d.Varint()
	c.Lease = getHash(d)
	c.Owner = getHash(d)
	c.TTLSeconds = d.Varint()
}

func (c *LeaseRelease) encodeBody(e *wire.Encoder) {
	e.Varint(c.Now)
	putHash(e, c.Lease)
	putHash(e, c.Owner)
}

func (c *LeaseRelease) decodeBody(d *wire.Decoder, _ byte) {
	c.Now = d.Varint()
	c.Lease = getHash(d)
	c.Owner = getHash(d)
}

// encodeOwnerJSON writes the body LeaseComplete and LeaseCheckpoint
// share: the owner's lease and a JSON value.
func encodeOwnerJSON(e *wire.Encoder, now int64, lease, owner secret.Hash, value []byte) {
	e.Varint(now)
	putHash(e, lease)
	putHash(e, owner)
	e.Blob(value)
}

func decodeOwnerJSON(d *wire.Decoder, now *int64, lease, owner *secret.Hash, value *[]byte) {
	*now = d.Varint()
	*lease = getHash(d)
	*owner = getHash(d)
	*value = d.Blob()
}

func (c *LeaseComplete) encodeBody(e *wire.Encoder) {
	encodeOwnerJSON(e, c.Now, c.Lease, c.Owner, c.Result)
}

func (c *LeaseComplete) decodeBody(d *wire.Decoder, _ byte) {
	decodeOwnerJSON(d, &c.Now, &c.Lease, &c.Owner, &c.Result)
}

func (c *QueueCreate) encodeBody(e *wire.Encoder) {
	e.Varint(c.Now)
	putID(e, c.Queue)
	putHash(e, c.WriteToken)
	putHash(e, c.WorkerToken)
	putHash(e, c.ReadToken)
	putHash(e, c.Client)
}

func (c *QueueCreate) decodeBody(d *wire.Decoder, _ byte) {
	c.Now = d.Varint()
	c.Queue = getID(d)
	c.WriteToken = getHash(d)
	c.WorkerToken = getHash(d)
	c.ReadToken = getHash(d)
	c.Client = getHash(d)
}

func (c *JobEnqueue) encodeBody(e *wire.Encoder) {
	e.Varint(c.Now)
	putID(e, c.Queue)
	putHash(e, c.Token)
	putID(e, c.Job)
	e.String(c.Key)
	e.Blob(c.Payload)
}

func (c *JobEnqueue) decodeBody(d *wire.Decoder, _ byte) {
	c.Now = d.Varint()
	c.Queue = getID(d)
	c.Token = getHash(d)
	c.Job = getID(d)
	c.Key = d.String()
	c.Payload = d.Blob()
}

// writtenVersion: version 2 added ByRequest.
func (*JobClaim) writtenVersion() byte { return 2 }

func (c *JobClaim) encodeBody(e *wire.Encoder) {
	e.Varint(c.Now)
	putID(e, c.Queue)
	putHash(e, c.Token)
	putHash(e, c.Receipt)
	e.Varint(c.VisibilitySeconds)
	e.Bool(c.ByRequest)
}

func (c *JobClaim) decodeBody(d *wire.Decoder, version byte) {
	c.Now = d.Varint()
	c.Queue = getID(d)
	c.Token = getHash(d)
	c.Receipt = getHash(d)
	c.VisibilitySeconds = d.Varint()
	if version >= 2 {
		c.ByRequest = d.Bool()
	}
}

// receiptFields is the shared layout of ack, release and renew.
func encodeReceiptFields(e *wire.Encoder, now int64, q secret.ID, tok secret.Hash, job secret.ID, rcpt secret.Hash) {
	e.Varint(now)
	putID(e, q)
	putHash(e, tok)
	putID(e, job)
	putHash(e, rcpt)
}

func decodeReceiptFields(d *wire.Decoder, now *int64, q *secret.ID, tok *secret.Hash, job *secret.ID, rcpt *secret.Hash) {
	*now = d.Varint()
	*q = getID(d)
	*tok = getHash(d)
	*job = getID(d)
	*rcpt = getHash(d)
}

func (c *JobAck) encodeBody(e *wire.Encoder) {
	encodeReceiptFields(e, c.Now, c.Queue, c.Token, c.Job, c.Receipt)
}

func (c *JobAck) decodeBody(d *wire.Decoder, _ byte) {
	decodeReceiptFields(d, &c.Now, &c.Queue, &c.Token, &c.Job, &c.Receipt)
}

// writtenVersion: version 2 added DelaySeconds.
func (*JobRelease) writtenVersion() byte { return 2 }

func (c *JobRelease) encodeBody(e *wire.Encoder) {
	encodeReceiptFields(e, c.Now, c.Queue, c.Token, c.Job, c.Receipt)
	e.Varint(c.DelaySeconds)
}

func (c *JobRelease) decodeBody(d *wire.Decoder, version byte) {
	decodeReceiptFields(d, &c.Now, &c.Queue, &c.Token, &c.Job, &c.Receipt)
	if version >= 2 {
		c.DelaySeconds = d.Varint()
	}
}

func (c *JobRetry) encodeBody(e *wire.Encoder) {
	e.Varint(c.Now)
	putID(e, c.Queue)
	putHash(e, c.Token)
	putID(e, c.Job)
}

func (c *JobRetry) decodeBody(d *wire.Decoder, _ byte) {
	c.Now = d.Varint()
	c.Queue = getID(d)
	c.Token = getHash(d)
	c.Job = getID(d)
}

func (c *JobRenew) encodeBody(e *wire.Encoder) {
	encodeReceiptFields(e, c.Now, c.Queue, c.Token, c.Job, c.Receipt)
	e.Varint(c.VisibilitySeconds)
}

func (c *JobRenew) decodeBody(d *wire.Decoder, _ byte) {
	decodeReceiptFields(d, &c.Now, &c.Queue, &c.Token, &c.Job, &c.Receipt)
	c.VisibilitySeconds = d.Varint()
}

func (c *Sweep) encodeBody(e *wire.Encoder) {
	e.Varint(c.Now)
	e.Varint(c.Limit)
}

func (c *Sweep) decodeBody(d *wire.Decoder, _ byte) {
	c.Now = d.Varint()
	c.Limit = d.Varint()
}

func (c *SetSettings) encodeBody(e *wire.Encoder) {
	e.Varint(c.Now)
	c.Patch.encode(e)
}

func (c *SetSettings) decodeBody(d *wire.Decoder, _ byte) {
	c.Now = d.Varint()
	c.Patch.decode(d)
}

// Encode returns the log-entry bytes of c: its type byte, the body version
// and the body.
func Encode(c Command) []byte {
	e := wire.NewEncoder(make([]byte, 0, SizeHint(c)))
	encodeCommand(e, c)
	return e.Bytes()
}

// SizeHint is at least the encoded size of c's fixed-size fields plus its
// variable ones, so that encoding it seldom grows the buffer.
func SizeHint(c Command) int {
	size := 160 // more than the fixed-size fields of any command take
	switch c := c.(type) {
	case *JobEnqueue:
		size += len(c.Key) + len(c.Payload)
	case *LeaseComplete:
		size += len(c.Result)
	case *LeaseCheckpoint:
		size += len(c.Checkpoint)
	case *Batch:
		for _, sub := range c.Commands {
			size += SizeHint(sub) + 4
		}
	}
	return size
}

// encodeCommand appends c's type byte, body version and body to e.
func encodeCommand(e *wire.Encoder, c Command) {
	e.Byte(byte(c.Type()))
	e.Byte(versionOf(c))
	c.encodeBody(e)
}

// newCommand returns an empty command of type t, or nil for an unknown type.
func newCommand(t CommandType) Command {
	switch t {
	case TypeLeaseAcquire:
		return &LeaseAcquire{}
	case TypeLeaseRenew:
		return &LeaseRenew{}
	case TypeLeaseRelease:
		return &LeaseRelease{}
	case TypeLeaseComplete:
		return &LeaseComplete{}
	case TypeLeaseCheckpoint:
		return &LeaseCheckpoint{}
	case TypeQueueCreate:
		return &QueueCreate{}
	case TypeJobEnqueue:
		return &JobEnqueue{}
	case TypeJobClaim:
		return &JobClaim{}
	case TypeJobAck:
		return &JobAck{}
	case TypeJobRelease:
		return &JobRelease{}
	case TypeJobRenew:
		return &JobRenew{}
	case TypeSweep:
		return &Sweep{}
	case TypeSetSettings:
		return &SetSettings{}
	case TypeSetNode:
		return &SetNode{}
	case TypeRemoveNode:
		return &RemoveNode{}
	case TypeBatch:
		return &Batch{}
	case TypeJobRetry:
		return &JobRetry{}
	case TypeFenceFloor:
		return &FenceFloor{}
	case TypeSetLevel:
		return &SetLevel{}
	}
	return nil
}

// Decode parses log-entry bytes produced by Encode.
func Decode(b []byte) (Command, error) {
	if len(b) < 2 {
		return nil, fmt.Errorf("decode command: entry of %d bytes is shorter than its header", len(b))
	}
	t, version := CommandType(b[0]), b[1]
	c := newCommand(t)
	if c == nil {
		return nil, fmt.Errorf("decode command: unknown command type %d (written by a newer holdfast?)", t)
	}
	if version < 1 || version > newestVersion(c) {
		return nil, fmt.Errorf("decode command: type %d has unknown body version %d", t, version)
	}
	d := wire.NewDecoder(b[2:])
	c.decodeBody(d, version)
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("decode command type %d: %w", t, err)
	}
	if b, ok := c.(*Batch); ok {
		if err := b.valid(); err != nil {
			return nil, fmt.Errorf("decode batch: %w", err)
		}
	}
	return c, nil
}

// LeaseCheckpoint stores the progress of the holder of a single-slot
// lease, which every later grant of the key in its lifecycle returns.
type LeaseCheckpoint struct {
	Now        int64
	Lease      secret.Hash
	Owner      secret.Hash
	Checkpoint []byte // canonical, redacted JSON
}

// Type implements Command.
func (*LeaseCheckpoint) Type() CommandType { return TypeLeaseCheckpoint }

// Stamp implements Command.
func (c *LeaseCheckpoint) Stamp() int64 { return c.Now }

func (c *LeaseCheckpoint) encodeBody(e *wire.Encoder) {
	encodeOwnerJSON(e, c.Now, c.Lease, c.Owner, c.Checkpoint)
}

func (c *LeaseCheckpoint) decodeBody(d *wire.Decoder, _ byte) {
	decodeOwnerJSON(d, &c.Now, &c.Lease, &c.Owner, &c.Checkpoint)
}
