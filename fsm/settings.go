package fsm

import (
	"fmt"

	"github.com/holdfast/holdfast/internal/wire"
)

// Settings are the limits the service enforces. They are replicated state:
// they change only through a logged SetSettings command, so every replica
// applies the same rules. The defaults are those of the hosted API's
// specification.
type Settings struct {
	// LeaseLifecycleSeconds is the fixed lifetime that a key's first
	// acquisition starts; nothing extends it.
	LeaseLifecycleSeconds int64 `json:"lease_lifecycle_seconds"`
	// LeaseTTLMinSeconds, LeaseTTLMaxSeconds and LeaseTTLDefaultSeconds bound ttl_seconds.
	LeaseTTLMinSeconds     int64 `json:"lease_ttl_min_seconds"`
	LeaseTTLMaxSeconds     int64 `json:"lease_ttl_max_seconds"`
	LeaseTTLDefaultSeconds int64 `json:"lease_ttl_default_seconds"`
	// MaxResultBytes bounds a completed lease's stored result (after redaction).
	MaxResultBytes int64 `json:"max_result_bytes"`

	// QueueLifetimeSeconds is the fixed lifetime of a queue and all its data.
	QueueLifetimeSeconds int64 `json:"queue_lifetime_seconds"`
	// QueueMaxJobs is the number of distinct jobs a queue accepts over its lifetime.
	QueueMaxJobs int64 `json:"queue_max_jobs"`
	// QueueMaxAttempts is the number of claims after which an unacknowledged job fails.
	QueueMaxAttempts int64 `json:"queue_max_attempts"`
	// VisibilityMinSeconds, VisibilityMaxSeconds and VisibilityDefaultSeconds bound a claim's window.
	VisibilityMinSeconds     int64 `json:"visibility_min_seconds"`
	VisibilityMaxSeconds     int64 `json:"visibility_max_seconds"`
	VisibilityDefaultSeconds int64 `json:"visibility_default_seconds"`
	// MaxPayloadBytes bounds a job's canonical JSON payload.
	MaxPayloadBytes int64 `json:"max_payload_bytes"`
	// QueuesPerClient is how many queues one client address may create per window.
	QueuesPerClient int64 `json:"queues_per_client"`
	// QueueCreateWindowSeconds is the window QueuesPerClient counts over.
	QueueCreateWindowSeconds int64 `json:"queue_create_window_seconds"`

	// MaxLeases bounds the lease records the cluster holds (a record lives
	// for its key's 24-hour lifecycle): beyond it an acquire of a new key is
	// refused, while keys that have a record work as before.
	MaxLeases int64 `json:"max_leases"`
	// MaxQueues bounds the live queues: beyond it queue creation is refused.
	MaxQueues int64 `json:"max_queues"`
}

// DefaultSettings returns the limits of the specification.
func DefaultSettings() Settings {
	return Settings{
		LeaseLifecycleSeconds:    86400,
		LeaseTTLMinSeconds:       1,
		LeaseTTLMaxSeconds:       86400,
		LeaseTTLDefaultSeconds:   60,
		MaxResultBytes:           32 * 1024,
		QueueLifetimeSeconds:     86400,
		QueueMaxJobs:             100,
		QueueMaxAttempts:         5,
		VisibilityMinSeconds:     30,
		VisibilityMaxSeconds:     900,
		VisibilityDefaultSeconds: 60,
		MaxPayloadBytes:          16384,
		QueuesPerClient:          20,
		QueueCreateWindowSeconds: 86400,
		MaxLeases:                initialMaxLeases,
		MaxQueues:                initialMaxQueues,
	}
}

// The bounds a state starts with: those of the builds that kept every
// record in memory. Every build must start a state with them, so that a
// log replayed from its first entry gives the same state on every build;
// the cluster raises them to the defaults below with the level that
// brought them (capacityLevel).
const (
	initialMaxLeases = 2_000_000
	initialMaxQueues = 20_000
)

// The default bounds of a cluster whose records are on disk, from
// capacityLevel on: what a node's disk holds at a day of records (a
// completed lease with a 512-byte result takes about 600 bytes on disk),
// with the free-space floor refusing new keys before the disk fills.
const (
	DefaultMaxLeases = 50_000_000
	DefaultMaxQueues = 500_000
)

// capacityLevel is the cluster level at which max_leases and max_queues
// rise from the initial bounds to the defaults, where an operator has not
// set them to something else: the level every node's snapshot is its
// store's files (cluster.ArchiveLevel), the last of the state's move to
// disk.
const capacityLevel = 4

// raiseToDefaults raises the bounds that still hold their initial values
// to the defaults; a value an operator set is kept.
func (s *Settings) raiseToDefaults() {
	if s.MaxLeases == initialMaxLeases {
		s.MaxLeases = DefaultMaxLeases
	}
	if s.MaxQueues == initialMaxQueues {
		s.MaxQueues = DefaultMaxQueues
	}
}

// maxSettingValue keeps every derived millisecond value far from overflow.
const maxSettingValue = 10 * 365 * 86400

// SettingError is a setting that breaks a rule.
type SettingError struct {
	// Field is the setting at fault.
	Field string
	msg   string
}

func (e *SettingError) Error() string { return e.msg }

// FieldName is the setting at fault.
func (e *SettingError) FieldName() string { return e.Field }

// Validate reports the first setting that breaks a rule, naming it.
func (s Settings) Validate() error {
	fields := []struct {
		name string
		v    int64
	}{
		{"lease_lifecycle_seconds", s.LeaseLifecycleSeconds},
		{"lease_ttl_min_seconds", s.LeaseTTLMinSeconds},
		{"lease_ttl_max_seconds", s.LeaseTTLMaxSeconds},
		{"lease_ttl_default_seconds", s.LeaseTTLDefaultSeconds},
		{"max_result_bytes", s.MaxResultBytes},
		{"queue_lifetime_seconds", s.QueueLifetimeSeconds},
		{"queue_max_jobs", s.QueueMaxJobs},
		{"queue_max_attempts", s.QueueMaxAttempts},
		{"visibility_min_seconds", s.VisibilityMinSeconds},
		{"visibility_max_seconds", s.VisibilityMaxSeconds},
		{"visibility_default_seconds", s.VisibilityDefaultSeconds},
		{"max_payload_bytes", s.MaxPayloadBytes},
		{"queues_per_client", s.QueuesPerClient},
		{"queue_create_window_seconds", s.QueueCreateWindowSeconds},
		{"max_leases", s.MaxLeases},
		{"max_queues", s.MaxQueues},
	}
	for _, f := range fields {
		if f.v < 1 || f.v > maxSettingValue {
			return &SettingError{Field: f.name, msg: fmt.Sprintf("%s must be an integer from 1 to %d", f.name, maxSettingValue)}
		}
	}
	if err := orderedRange("lease_ttl", s.LeaseTTLMinSeconds, s.LeaseTTLDefaultSeconds, s.LeaseTTLMaxSeconds); err != nil {
		return err
	}
	return orderedRange("visibility", s.VisibilityMinSeconds, s.VisibilityDefaultSeconds, s.VisibilityMaxSeconds)
}

func orderedRange(prefix string, lo, def, hi int64) error {
	if lo > def || def > hi {
		return &SettingError{Field: prefix + "_default_seconds", msg: fmt.Sprintf("%s_min_seconds <= %s_default_seconds <= %s_max_seconds must hold", prefix, prefix, prefix)}
	}
	return nil
}

// encode writes the number of settings, then each in wire order, so a
// later version that appends settings can still read this one.
func (s Settings) encode(e *wire.Encoder) {
	vs := s.values()
	e.Uvarint(uint64(len(vs)))
	for _, v := range vs {
		e.Varint(*v)
	}
}

// decode reads n settings in wire order; the ones after them, which the
// writer did not know, keep their defaults.
func (s *Settings) decode(d *wire.Decoder, n uint64) {
	*s = DefaultSettings()
	vs := s.values()
	if n > uint64(len(vs)) {
		d.Fail("snapshot names an unknown setting")
		return
	}
	for _, v := range vs[:n] {
		*v = d.Varint()
	}
}

// settingsV1 is how many settings a version 1 snapshot holds, uncounted.
const settingsV1 = 14

// values lists the settings in their fixed wire order. New settings are
// appended, never inserted.
func (s *Settings) values() []*int64 {
	return []*int64{
		&s.LeaseLifecycleSeconds, &s.LeaseTTLMinSeconds, &s.LeaseTTLMaxSeconds, &s.LeaseTTLDefaultSeconds,
		&s.MaxResultBytes, &s.QueueLifetimeSeconds, &s.QueueMaxJobs, &s.QueueMaxAttempts,
		&s.VisibilityMinSeconds, &s.VisibilityMaxSeconds, &s.VisibilityDefaultSeconds,
		&s.MaxPayloadBytes, &s.QueuesPerClient, &s.QueueCreateWindowSeconds,
		&s.MaxLeases, &s.MaxQueues,
	}
}

// SettingsPatch names some settings to change; nil fields keep their value.
// It is what SetSettings carries, so concurrent changes of different
// settings never undo each other.
type SettingsPatch struct {
	LeaseLifecycleSeconds    *int64 `json:"lease_lifecycle_seconds,omitempty"`
	LeaseTTLMinSeconds       *int64 `json:"lease_ttl_min_seconds,omitempty"`
	LeaseTTLMaxSeconds       *int64 `json:"lease_ttl_max_seconds,omitempty"`
	LeaseTTLDefaultSeconds   *int64 `json:"lease_ttl_default_seconds,omitempty"`
	MaxResultBytes           *int64 `json:"max_result_bytes,omitempty"`
	QueueLifetimeSeconds     *int64 `json:"queue_lifetime_seconds,omitempty"`
	QueueMaxJobs             *int64 `json:"queue_max_jobs,omitempty"`
	QueueMaxAttempts         *int64 `json:"queue_max_attempts,omitempty"`
	VisibilityMinSeconds     *int64 `json:"visibility_min_seconds,omitempty"`
	VisibilityMaxSeconds     *int64 `json:"visibility_max_seconds,omitempty"`
	VisibilityDefaultSeconds *int64 `json:"visibility_default_seconds,omitempty"`
	MaxPayloadBytes          *int64 `json:"max_payload_bytes,omitempty"`
	QueuesPerClient          *int64 `json:"queues_per_client,omitempty"`
	QueueCreateWindowSeconds *int64 `json:"queue_create_window_seconds,omitempty"`
	MaxLeases                *int64 `json:"max_leases,omitempty"`
	MaxQueues                *int64 `json:"max_queues,omitempty"`
}

// slots lists the patch's fields in the wire order of Settings.values.
func (p *SettingsPatch) slots() []**int64 {
	return []**int64{
		&p.LeaseLifecycleSeconds, &p.LeaseTTLMinSeconds, &p.LeaseTTLMaxSeconds, &p.LeaseTTLDefaultSeconds,
		&p.MaxResultBytes, &p.QueueLifetimeSeconds, &p.QueueMaxJobs, &p.QueueMaxAttempts,
		&p.VisibilityMinSeconds, &p.VisibilityMaxSeconds, &p.VisibilityDefaultSeconds,
		&p.MaxPayloadBytes, &p.QueuesPerClient, &p.QueueCreateWindowSeconds,
		&p.MaxLeases, &p.MaxQueues,
	}
}

// Empty reports whether the patch names no setting.
func (p SettingsPatch) Empty() bool {
	for _, f := range p.slots() {
		if *f != nil {
			return false
		}
	}
	return true
}

// With returns s with the patch's named settings replaced.
func (s Settings) With(p SettingsPatch) Settings {
	dst := s.values()
	for i, f := range p.slots() {
		if *f != nil {
			*dst[i] = **f
		}
	}
	return s
}

// PatchOf returns a patch that names every setting of s.
func PatchOf(s Settings) SettingsPatch {
	var p SettingsPatch
	src := s.values()
	for i, f := range p.slots() {
		v := *src[i]
		*f = &v
	}
	return p
}

func (p SettingsPatch) encode(e *wire.Encoder) {
	var mask uint64
	slots := p.slots()
	for i, f := range slots {
		if *f != nil {
			mask |= 1 << i
		}
	}
	e.Uvarint(mask)
	for _, f := range slots {
		if *f != nil {
			e.Varint(**f)
		}
	}
}

func (p *SettingsPatch) decode(d *wire.Decoder) {
	mask := d.Uvarint()
	slots := p.slots()
	if mask>>len(slots) != 0 {
		d.Fail("settings patch names an unknown setting")
		return
	}
	for i, f := range slots {
		if mask&(1<<i) != 0 {
			v := d.Varint()
			*f = &v
		}
	}
}
