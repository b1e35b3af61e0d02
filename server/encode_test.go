package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/fsm"
)

// stdEncode is what encodeJSON must match: encoding/json without HTML
// escaping, no trailing newline.
func stdEncode(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func TestEncodeJSONMatchesEncodingJSON(t *testing.T) {
	cases := []any{
		gin.H{},
		gin.H{"ok": true, "b": false, "n": nil, "i": -42, "i64": int64(1) << 62, "u": uint64(1) << 63},
		gin.H{"s": "plain", "esc": "q\" b\\ n\n r\r t\t bs\b ff\f nul\x00 x1f\x1f del\x7f <>&", "u": "é ü 中 \u2028\u2029 😀", "bad": "a\xffb\xc0"},
		gin.H{"raw": json.RawMessage(`{"a":[1,2,{"b":null}]}`), "null": json.RawMessage(nil), "spaced": json.RawMessage(`{ "a" : 1 }`)},
		gin.H{"nested": gin.H{"z": 1, "a": gin.H{"m": "x"}}, "job": nil},
		gin.H{"stored": storedJSON(`{"k":"v"}`), "none": storedJSON(nil)},
		gin.H{"other": []int{1, 2}, "f": 1.5},
	}
	for i, v := range cases {
		got, err := encodeJSON(v)
		if err != nil {
			t.Fatal(err)
		}
		if want := stdEncode(t, v); !bytes.Equal(got, want) {
			t.Fatalf("case %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func FuzzEncodeJSONString(f *testing.F) {
	for _, s := range []string{"", "abc", "\x00\x1f\"\\", "\u2028é\xff", "<script>&"} {
		f.Add(s, int64(7))
	}
	f.Fuzz(func(t *testing.T, s string, n int64) {
		v := gin.H{s: s, "n": n, "k" + s: gin.H{"v": s}}
		got, err := encodeJSON(v)
		if err != nil {
			t.Fatal(err)
		}
		if want := stdEncode(t, v); !bytes.Equal(got, want) {
			t.Fatalf("got %s want %s", got, want)
		}
	})
}

// jobAsMap is the job's answer built as a gin.H, the form every other
// answer takes, for comparison with jobReply's direct encoding.
func jobAsMap(j *fsm.JobView, receipt *string, dedup *bool) gin.H {
	job := gin.H{
		"job_id": j.ID.String(), "job_key": j.Key, "payload": storedJSON(j.Payload), "status": j.Status.String(),
		"attempts": j.Attempts, "created_at_timestamp": secondsOf(j.CreatedAt), "updated_at_timestamp": secondsOf(j.UpdatedAt),
		"expire_timestamp": secondsOf(j.QueueExpiresAt),
	}
	if j.VisibleAt != 0 {
		job["claim_expire_timestamp"] = secondsOf(j.VisibleAt)
	}
	if j.CompletedAt != 0 {
		job["completed_at_timestamp"] = secondsOf(j.CompletedAt)
	}
	if receipt != nil {
		job["receipt"] = *receipt
	}
	body := gin.H{"ok": true, "job": job}
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
		r := jobReply(http.StatusOK, tc.j, tc.receipt, tc.dedup)
		want, err := encodeJSON(jobAsMap(tc.j, tc.receipt, tc.dedup))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.raw, want) {
			t.Fatalf("case %d:\n got %s\nwant %s", i, r.raw, want)
		}
	}
}

func BenchmarkJobReply(b *testing.B) {
	j, rc := sampleJob(), "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	b.ReportAllocs()
	for b.Loop() {
		_ = jobReply(http.StatusOK, j, &rc, nil)
	}
}

func BenchmarkJobReplyAsMap(b *testing.B) {
	j, rc := sampleJob(), "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := encodeJSON(jobAsMap(j, &rc, nil)); err != nil {
			b.Fatal(err)
		}
	}
}
