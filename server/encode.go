package server

import (
	"slices"
	"strconv"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/jsonenc"
	"github.com/holdfast/holdfast/server/service"
)

// jobReply is the answer carrying one job: {"job":{...},"ok":true}, with
// the receipt of a claim inside the job, and for an enqueue "deduplicated"
// and "job_id" beside it. It is written directly: it is the answer of every
// queue write.
func jobReply(status int, j *fsm.JobView, receipt *string, dedup *bool) reply {
	return reply{Status: status, job: jobBody{j: j, receipt: receipt, dedup: dedup}}
}

// jobBody is a job answer's body, encoded when the answer is written, into
// a buffer the writer may reuse; its job is nil in any other answer.
type jobBody struct {
	j       *fsm.JobView
	receipt *string
	dedup   *bool
}

// appendTo appends the body's JSON to b.
func (jb *jobBody) appendTo(b []byte) []byte {
	j := jb.j
	b = slices.Grow(b, 320+len(j.Payload)+len(j.Key))
	b = append(b, '{')
	if jb.dedup != nil {
		b = append(b, `"deduplicated":`...)
		b = strconv.AppendBool(b, *jb.dedup)
		b = append(b, ',')
	}
	b = append(b, `"job":`...)
	b = appendJob(b, j, jb.receipt)
	if jb.dedup != nil {
		b = append(b, `,"job_id":"`...)
		b = append(b, j.ID.String()...)
		b = append(b, '"')
	}
	return append(b, `,"ok":true}`...)
}

// appendJob appends a job's fields with sorted keys, as the API shows them
// (times as whole Unix seconds; the claim's end and the completion only
// when set).
func appendJob(b []byte, j *fsm.JobView, receipt *string) []byte {
	field := func(b []byte, name string, v int64) []byte {
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		return strconv.AppendInt(b, v, 10)
	}
	b = field(append(b, '{'), "attempts", j.Attempts)
	if j.AvailableAt != 0 {
		b = field(append(b, ','), "available_at_timestamp", service.UnixSeconds(j.AvailableAt))
	}
	if j.VisibleAt != 0 {
		b = field(append(b, ','), "claim_expire_timestamp", service.UnixSeconds(j.VisibleAt))
	}
	if j.CompletedAt != 0 {
		b = field(append(b, ','), "completed_at_timestamp", service.UnixSeconds(j.CompletedAt))
	}
	b = field(append(b, ','), "created_at_timestamp", service.UnixSeconds(j.CreatedAt))
	b = field(append(b, ','), "expire_timestamp", service.UnixSeconds(j.QueueExpiresAt))
	b = append(b, `,"job_id":"`...)
	b = append(b, j.ID.String()...)
	b = append(b, `","job_key":`...)
	b = jsonenc.AppendString(b, j.Key)
	b = append(b, `,"payload":`...)
	if j.Payload == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, j.Payload...)
	}
	if receipt != nil {
		b = append(b, `,"receipt":`...)
		b = jsonenc.AppendString(b, *receipt)
	}
	b = append(b, `,"status":`...)
	b = jsonenc.AppendString(b, j.Status.String())
	b = field(append(b, ','), "updated_at_timestamp", service.UnixSeconds(j.UpdatedAt))
	return append(b, '}')
}
