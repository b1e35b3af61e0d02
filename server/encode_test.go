package server

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/jsonenc"
	"github.com/holdfast/holdfast/server/service"
)

// jobAsMap is the job's answer built as a jsonenc.H, the form every other
// answer takes, for comparison with jobReply's direct encoding.
func jobAsMap(j *fsm.JobView, receipt *string, dedup *bool) jsonenc.H {
	job := jsonenc.H{
		"job_id": j.ID.String(), "job_key": j.Key, "payload": jsonenc.Stored(j.Payload), "status": j.Status.String(),
		"attempts": j.Attempts, "created_at_timestamp": service.UnixSeconds(j.CreatedAt), "updated_at_timestamp": service.UnixSeconds(j.UpdatedAt),
		"expire_timestamp": service.UnixSeconds(j.QueueExpiresAt),
	}
	if j.VisibleAt != 0 {
		job["claim_expire_timestamp"] = service.UnixSeconds(j.VisibleAt)
	}
	if j.CompletedAt != 0 {
		job["completed_at_timestamp"] = service.UnixSeconds(j.CompletedAt)
	}
	if receipt != nil {
		job["receipt"] = *receipt
	}
	body := jsonenc.H{"ok": true, "job": job}
	if dedup != nil {
		body["deduplicated"], body["job_id"] = *dedup, j.ID.String()
	}
	return body
}

func sampleJob() *fsm.JobView {
	j := &fsm.JobView{Key: "w1-42 \"quoted\"", Payload: []byte(`{"n":1,"s":"\u2028"}`), Status: fsm.JobClaimedStatus, Attempts: 2,
		CreatedAt: 1796000000123, UpdatedAt: 1796000001999, VisibleAt: 1796000061000, QueueExpiresAt: 1796086400000}
	j.ID[0], j.ID[15] = 0xab, 0x01
	return j
}

func TestJobReplyMatchesTheMapEncoding(t *testing.T) {
	rc, yes, no := "0123abcd", true, false
	done := sampleJob()
	done.Status, done.VisibleAt, done.CompletedAt = fsm.JobCompleted, 0, 1796000002500
	for i, tc := range []struct {
		j       *fsm.JobView
		receipt *string
		dedup   *bool
	}{{sampleJob(), nil, nil}, {sampleJob(), &rc, nil}, {sampleJob(), nil, &yes}, {done, nil, &no}, {&fsm.JobView{Status: fsm.JobPending}, nil, nil}} {
		got, err := jobReply(http.StatusOK, tc.j, tc.receipt, tc.dedup).body([]byte("reused"))
		if err != nil {
			t.Fatal(err)
		}
		want, err := jsonenc.Encode(jobAsMap(tc.j, tc.receipt, tc.dedup))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, append([]byte("reused"), want...)) {
			t.Fatalf("case %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func BenchmarkJobReply(b *testing.B) {
	j, rc := sampleJob(), "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		buf, _ = jobReply(http.StatusOK, j, &rc, nil).body(buf[:0])
	}
}

func BenchmarkJobReplyAsMap(b *testing.B) {
	j, rc := sampleJob(), "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := jsonenc.Encode(jobAsMap(j, &rc, nil)); err != nil {
			b.Fatal(err)
		}
	}
}
