package fsm

import "github.com/holdfast/holdfast/internal/secret"

// LeaseOutcome is the business outcome of a lease command. Outcomes are
// results, not errors: the HTTP layer maps each one to a status code.
type LeaseOutcome uint8

// Lease outcomes.
const (
	// LeaseGranted: the caller now owns the lease (acquire).
	LeaseGranted LeaseOutcome = iota + 1
	// LeaseHeld: another owner holds an unexpired lease (acquire).
	LeaseHeld
	// LeaseCompleted: the work is done and the result is returned (acquire with
	// a matching fingerprint, or complete).
	LeaseCompleted
	// LeaseConflict: the key is bound to another fingerprint in this lifecycle.
	LeaseConflict
	// LeaseRenewed: the short expiry moved (renew).
	LeaseRenewed
	// LeaseReleased: the key is free at once (release).
	LeaseReleased
	// LeaseLost: the owner token is old, invalid or expired, or the lease is
	// not held (renew, release, complete).
	LeaseLost
	// LeaseInvalid: the command broke a replicated limit that changed after
	// the leader validated it; nothing changed.
	LeaseInvalid
	// LeaseLimitReached: the key has no record and the cluster holds
	// max_leases records (acquire); nothing changed.
	LeaseLimitReached
	// LeaseSlotsConflict: the key's slot count, fixed by its first acquire
	// in this lifecycle, is not the one asked for (acquire); Slots is the
	// key's.
	LeaseSlotsConflict
	// LeaseSlotsRefused: the key has more than one slot, and results and
	// checkpoints are for single-slot keys only (complete, checkpoint);
	// nothing changed.
	LeaseSlotsRefused
	// LeaseCheckpointed: the holder's checkpoint is stored (checkpoint).
	LeaseCheckpointed
)

var leaseOutcomeNames = [...]string{"", "granted", "held", "completed", "conflict", "renewed", "released", "lost", "invalid", "limit_reached", "slots_conflict", "slots_refused", "checkpointed"}

// String returns the outcome's name.
func (o LeaseOutcome) String() string {
	if int(o) < len(leaseOutcomeNames) {
		return leaseOutcomeNames[o]
	}
	return "unknown"
}

// LeaseResult is what a lease command returns. Times are Unix milliseconds.
type LeaseResult struct {
	Outcome LeaseOutcome
	// Now is the state-machine time the command was applied at.
	Now          int64
	FencingToken uint64
	// TTLSeconds is the granted or renewed ttl, reduced near the lifecycle's end.
	TTLSeconds        int64
	LeaseExpiresAt    int64
	AbsoluteExpiresAt int64
	// RetryAfterSeconds is set for LeaseHeld: whole seconds until the lease expires.
	RetryAfterSeconds int64
	CompletedAt       int64
	// Result is the stored canonical JSON of a completed lease.
	Result []byte
	// Limit is max_leases for LeaseLimitReached.
	Limit int64
	// Slots is the key's slot count and Held how many of them are held,
	// for a key with more than one slot (and Slots for LeaseSlotsConflict);
	// both are 0 for a single-slot key.
	Slots, Held uint32
	// Checkpoint is the key's last stored checkpoint, for a grant; for
	// LeaseCheckpointed, the one stored, without its Value. Never changed
	// once made.
	Checkpoint *Checkpoint
}

// Checkpoint is a lease's stored progress: canonical JSON, the fencing
// token of the holder that wrote it, and when (Unix milliseconds).
type Checkpoint struct {
	Value []byte
	Fence uint64
	At    int64
}

// QueueOutcome is the business outcome of a queue command.
type QueueOutcome uint8

// Queue outcomes.
const (
	// QueueCreated: a new queue exists.
	QueueCreated QueueOutcome = iota + 1
	// QueueRateLimited: the client address created its quota of queues in the window.
	QueueRateLimited
	// QueueIDTaken: the pre-generated queue id exists already; retry with another.
	QueueIDTaken
	// QueueNotFound: no live queue has this id (never created, or expired).
	QueueNotFound
	// QueueForbidden: the token presented is not this queue's token for the operation.
	QueueForbidden
	// JobNotFound: the queue has no job with this id.
	JobNotFound
	// JobCreated: a new job was enqueued.
	JobCreated
	// JobDeduplicated: a job with the same key and payload exists; it is returned.
	JobDeduplicated
	// JobKeyConflict: a job with the same key but another payload exists.
	JobKeyConflict
	// JobLimitReached: the queue holds its maximum of distinct jobs.
	JobLimitReached
	// JobIDTaken: the pre-generated job id exists already; retry with another.
	JobIDTaken
	// JobClaimed: a job was claimed.
	JobClaimed
	// QueueEmpty: no job is available to claim.
	QueueEmpty
	// JobAcked: the job is completed (also for a repeated ack with its receipt).
	JobAcked
	// JobReleased: the job is pending again, or failed if no attempts remain.
	JobReleased
	// JobRenewed: the claim's visibility window moved.
	JobRenewed
	// ReceiptRejected: the receipt is expired, superseded or otherwise not the
	// job's active claim; Reason says which.
	ReceiptRejected
	// QueueFound: a read query found what it asked for.
	QueueFound
	// QueueInvalid: the command broke a replicated limit that changed after the
	// leader validated it; nothing changed.
	QueueInvalid
	// QueueLimitReached: the cluster holds max_queues live queues (create);
	// nothing changed.
	QueueLimitReached
	// JobRetried: a failed job is pending again with no attempts (retry).
	JobRetried
	// JobNotFailed: only a failed job can be retried; Job shows its status
	// (retry). Nothing changed.
	JobNotFailed
)

var queueOutcomeNames = [...]string{"", "created", "rate_limited", "queue_id_taken", "queue_not_found", "forbidden",
	"job_not_found", "job_created", "deduplicated", "job_key_conflict", "job_limit_reached", "job_id_taken",
	"claimed", "empty", "acked", "released", "renewed", "receipt_rejected", "found", "invalid", "queue_limit_reached",
	"retried", "not_failed"}

// String returns the outcome's name.
func (o QueueOutcome) String() string {
	if int(o) < len(queueOutcomeNames) {
		return queueOutcomeNames[o]
	}
	return "unknown"
}

// RejectReason says why a receipt was refused.
type RejectReason uint8

// Reasons a receipt is refused.
const (
	// ReceiptMismatch: the receipt is not the job's latest claim (superseded or never issued for it).
	ReceiptMismatch RejectReason = iota + 1
	// ReceiptExpired: the receipt's claim ended (visibility window passed, or it was released).
	ReceiptExpired
	// ReceiptJobCompleted: the job was acknowledged; only a repeated ack is accepted.
	ReceiptJobCompleted
)

var rejectReasonNames = [...]string{"", "superseded", "expired", "completed"}

// String returns the reason's name.
func (r RejectReason) String() string {
	if int(r) < len(rejectReasonNames) {
		return rejectReasonNames[r]
	}
	return "unknown"
}

// JobStatus is a job's lifecycle status.
type JobStatus uint8

// Job statuses.
const (
	JobPending JobStatus = iota + 1
	JobClaimedStatus
	JobCompleted
	JobFailed
)

var jobStatusNames = [...]string{"", "pending", "claimed", "completed", "failed"}

// String returns the status name used by the API.
func (s JobStatus) String() string {
	if int(s) < len(jobStatusNames) {
		return jobStatusNames[s]
	}
	return "unknown"
}

// Counts are a queue's jobs by status.
type Counts struct {
	Pending   int `json:"pending"`
	Claimed   int `json:"claimed"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Total     int `json:"total"`
}

// QueueView is the readable part of a queue. Times are Unix milliseconds.
type QueueView struct {
	ID        secret.ID
	CreatedAt int64
	ExpiresAt int64
	Counts    Counts
}

// JobView is the readable part of a job; it never holds tokens or receipts.
// Times are Unix milliseconds; zero means not set.
type JobView struct {
	ID       secret.ID
	Key      string
	Payload  []byte
	Status   JobStatus
	Attempts int64
	// CreatedAt is when the job was enqueued, UpdatedAt its last status change.
	CreatedAt int64
	UpdatedAt int64
	// VisibleAt is when the current claim's window ends (claimed jobs only).
	VisibleAt int64
	// AvailableAt is when a pending job released with a delay may be
	// claimed again (pending jobs within their delay only).
	AvailableAt int64
	// CompletedAt is when the job was acknowledged.
	CompletedAt int64
	// QueueExpiresAt is the queue's fixed deadline, which is also the job's.
	QueueExpiresAt int64
}

// QueueResult is what a queue command returns.
type QueueResult struct {
	Outcome QueueOutcome
	// Now is the state-machine time the command was applied at.
	Now int64
	// Queue is the queue's view. Its Counts hold only Total, except in the
	// answer to a queue read (ReadQueue), which counts the jobs by status.
	Queue QueueView
	// Job is set for outcomes about one job.
	Job    *JobView
	Reason RejectReason
	// RetryAfterSeconds is set for QueueRateLimited.
	RetryAfterSeconds int64
	// Limit is max_queues for QueueLimitReached.
	Limit int64
}

// SweepResult says what one sweep entry expired.
type SweepResult struct {
	Now            int64
	LeasesRemoved  int
	QueuesRemoved  int
	ClaimsReturned int   // expired claims back to pending
	JobsFailed     int   // expired claims that used the last attempt
	ClientsPruned  int   // per-client creation records emptied
	SlotsFreed     int64 // slots of multi-slot keys whose leases ended
	// More is true when due work remained after Limit units; sweep again.
	More bool
}

// SettingsResult is what SetSettings returns.
type SettingsResult struct {
	Now      int64
	Applied  bool
	Settings Settings
	// Error names the rule a rejected setting broke.
	Error string
}
