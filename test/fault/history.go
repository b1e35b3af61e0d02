//go:build unix

package fault

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sync"
	"time"
)

// Event types of a history, as in Jepsen: an invocation, then exactly one
// of ok (it happened), fail (it certainly did not happen) or info (it may
// or may not have happened: a timeout or an "outcome unknown" answer).
const (
	Invoke = "invoke"
	OK     = "ok"
	Fail   = "fail"
	Info   = "info"
)

// NemesisProcess is the process number of the nemesis's events.
const NemesisProcess = -1

// Event is one line of the history file.
type Event struct {
	Index int `json:"index"`
	// Time is the harness's wall clock in Unix nanoseconds: the same clock
	// the nodes read (they run on this machine), so it can be compared
	// with the times the service reports.
	Time    int64  `json:"time_ns"`
	Process int    `json:"process"`
	Node    string `json:"node,omitempty"`
	Type    string `json:"type"`
	F       string `json:"f"`
	Key     string `json:"key,omitempty"`
	Value   any    `json:"value,omitempty"`
	// Status is the HTTP status of a completion, when there was one.
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Op is an invocation paired with its completion, for the checkers.
type Op struct {
	Process int
	Node    string
	F       string
	Key     string
	// Call and Ret are wall-clock Unix nanoseconds; Ret is math.MaxInt64
	// for an op that never completed (type info).
	Call, Ret int64
	// Type is OK, Fail or Info.
	Type   string
	Input  any
	Output any
	Status int
	Err    string
	// index is the invocation's event index, for stable ordering.
	index int
}

// Pending is an invoked operation waiting for its completion.
type Pending struct {
	op *Op
}

// Recorder collects the history of a run and streams it to a JSONL file.
// It is safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	file    *os.File
	w       *bufio.Writer
	events  int
	ops     []*Op
	nextPID int
	err     error
	windows []FaultWindow
	open    map[int]int // index in windows of a fault still active, by id
	nextWin int
}

// FaultWindow is the time a fault was active.
type FaultWindow struct {
	ID          int
	Start, End  int64 // wall-clock ns; End is 0 while active
	Description string
}

// NewRecorder writes the history to path.
func NewRecorder(path string) (*Recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create history file: %w", err)
	}
	return &Recorder{file: f, w: bufio.NewWriterSize(f, 64<<10), open: map[int]int{}}, nil
}

// NewProcess returns a fresh logical process number. A client whose
// operation ended in info is retired and continues as a new process.
func (r *Recorder) NewProcess() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.nextPID
	r.nextPID++
	return p
}

func (r *Recorder) writeLocked(e Event) {
	e.Index = r.events
	r.events++
	if r.err != nil {
		return
	}
	b, err := json.Marshal(e)
	if err != nil {
		r.err = fmt.Errorf("encode history event: %w", err)
		return
	}
	b = append(b, '\n')
	if _, err := r.w.Write(b); err != nil {
		r.err = fmt.Errorf("write history: %w", err)
	}
}

// Invoke records the invocation of f by process on node.
func (r *Recorder) Invoke(process int, node, f, key string, input any) *Pending {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now().UnixNano()
	op := &Op{Process: process, Node: node, F: f, Key: key, Call: now, Ret: math.MaxInt64, Type: Info, Input: input, index: r.events}
	r.ops = append(r.ops, op)
	r.writeLocked(Event{Time: now, Process: process, Node: node, Type: Invoke, F: f, Key: key, Value: input})
	return &Pending{op: op}
}

// Complete records the completion of p with type typ (OK, Fail or Info).
// An info completion keeps Ret at infinity: the operation may take effect
// at any time after its invocation.
func (r *Recorder) Complete(p *Pending, typ string, output any, status int, errText string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now().UnixNano()
	op := p.op
	op.Type, op.Output, op.Status, op.Err = typ, output, status, errText
	if typ != Info {
		op.Ret = now
	}
	r.writeLocked(Event{Time: now, Process: op.Process, Node: op.Node, Type: typ, F: op.F, Key: op.Key, Value: output, Status: status, Error: errText})
}

// FaultStart records the start of a fault and returns its id.
func (r *Recorder) FaultStart(desc string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now().UnixNano()
	id := r.nextWin
	r.nextWin++
	r.windows = append(r.windows, FaultWindow{ID: id, Start: now, Description: desc})
	r.open[id] = len(r.windows) - 1
	r.writeLocked(Event{Time: now, Process: NemesisProcess, Type: Info, F: "start-fault", Value: desc})
	return id
}

// FaultEnd records the healing of fault id.
func (r *Recorder) FaultEnd(id int, desc string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now().UnixNano()
	if i, ok := r.open[id]; ok {
		r.windows[i].End = now
		delete(r.open, id)
	}
	r.writeLocked(Event{Time: now, Process: NemesisProcess, Type: Info, F: "heal", Value: desc})
}

// Note records a nemesis or harness remark (no fault window).
func (r *Recorder) Note(f string, value any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writeLocked(Event{Time: time.Now().UnixNano(), Process: NemesisProcess, Type: Info, F: f, Value: value})
}

// Ops returns a copy of every operation so far, in invocation order.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Op, len(r.ops))
	for i, o := range r.ops {
		out[i] = *o
	}
	return out
}

// Windows returns the fault windows; an active one has End 0.
func (r *Recorder) Windows() []FaultWindow {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]FaultWindow(nil), r.windows...)
}

// Close flushes and closes the file.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.file == nil {
		return r.err
	}
	_ = r.flushLocked() // recorded in r.err; the file is closed either way
	if err := r.file.Close(); err != nil && r.err == nil {
		r.err = fmt.Errorf("close history: %w", err)
	}
	r.file = nil
	return r.err
}

// Flush writes buffered events to the file.
func (r *Recorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.flushLocked()
}

// flushLocked writes buffered events to the file, if open; r.mu is held.
func (r *Recorder) flushLocked() error {
	if r.file == nil {
		return r.err
	}
	if err := r.w.Flush(); err != nil && r.err == nil {
		r.err = fmt.Errorf("flush history: %w", err)
	}
	return r.err
}
