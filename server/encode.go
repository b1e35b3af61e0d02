package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/jsoncanon"
)

// Answers are encoded without reflection: a reply body is a gin.H of
// strings, integers, booleans, nil, stored JSON (json.RawMessage) and nested
// gin.H, written with sorted keys exactly as encoding/json writes them with
// HTML escaping off (a test compares the two on arbitrary values). Any
// other value type falls back to encoding/json for the whole body.

// storedJSON is JSON the state machine stored canonicalised (a payload, a
// result): it is written as it is, without being checked again.
type storedJSON []byte

// MarshalJSON returns the stored JSON, or null.
func (s storedJSON) MarshalJSON() ([]byte, error) {
	if s == nil {
		return []byte("null"), nil
	}
	return s, nil
}

// encodeJSON encodes v without HTML escaping, so stored JSON (payloads,
// results) comes back byte for byte as it was canonicalised.
func encodeJSON(v any) ([]byte, error) {
	if h, ok := v.(gin.H); ok {
		if b, ok := appendH(make([]byte, 0, 512), h); ok {
			return b, nil
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode JSON: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// appendH appends h as a JSON object with sorted keys; ok is false when a
// value has a type it does not know.
func appendH(b []byte, h gin.H) ([]byte, bool) {
	var small [16]string
	keys := small[:0]
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		var ok bool
		if b, ok = appendValue(b, h[k]); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

func appendValue(b []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case string:
		return appendJSONString(b, x), true
	case bool:
		return strconv.AppendBool(b, x), true
	case int:
		return strconv.AppendInt(b, int64(x), 10), true
	case int64:
		return strconv.AppendInt(b, x, 10), true
	case uint64:
		return strconv.AppendUint(b, x, 10), true
	case storedJSON:
		if x == nil {
			return append(b, "null"...), true
		}
		return append(b, x...), true
	case json.RawMessage:
		if x == nil {
			return append(b, "null"...), true
		}
		// Stored JSON is canonical and compact already; anything else goes
		// through encoding/json, which compacts and checks it.
		if !json.Valid(x) || bytes.ContainsAny(x, " \t\r\n") {
			return b, false
		}
		return append(b, x...), true
	case gin.H:
		if x == nil {
			return append(b, "null"...), true
		}
		return appendH(b, x)
	}
	return b, false
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s quoted as encoding/json does with HTML
// escaping off: \", \\, \n, \r, \t, \b, \f, other control characters and
// U+2028/U+2029 as \u escapes, invalid UTF-8 as U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = jsoncanon.AppendEscapedASCII(append(b, s[start:i]...), c)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// jobReply is the answer carrying one job: {"job":{...},"ok":true}, with
// the receipt of a claim inside the job, and for an enqueue "deduplicated"
// and "job_id" beside it. It is written directly: it is the answer of every
// queue write.
func jobReply(status int, j *fsm.JobView, receipt *string, dedup *bool) reply {
	b := make([]byte, 0, 320+len(j.Payload)+len(j.Key))
	b = append(b, '{')
	if dedup != nil {
		b = append(b, `"deduplicated":`...)
		b = strconv.AppendBool(b, *dedup)
		b = append(b, ',')
	}
	b = append(b, `"job":`...)
	b = appendJob(b, j, receipt)
	if dedup != nil {
		b = append(b, `,"job_id":"`...)
		b = append(b, j.ID.String()...)
		b = append(b, '"')
	}
	b = append(b, `,"ok":true}`...)
	return reply{Status: status, raw: b}
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
		b = field(append(b, ','), "available_at_timestamp", secondsOf(j.AvailableAt))
	}
	if j.VisibleAt != 0 {
		b = field(append(b, ','), "claim_expire_timestamp", secondsOf(j.VisibleAt))
	}
	if j.CompletedAt != 0 {
		b = field(append(b, ','), "completed_at_timestamp", secondsOf(j.CompletedAt))
	}
	b = field(append(b, ','), "created_at_timestamp", secondsOf(j.CreatedAt))
	b = field(append(b, ','), "expire_timestamp", secondsOf(j.QueueExpiresAt))
	b = append(b, `,"job_id":"`...)
	b = append(b, j.ID.String()...)
	b = append(b, `","job_key":`...)
	b = appendJSONString(b, j.Key)
	b = append(b, `,"payload":`...)
	if j.Payload == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, j.Payload...)
	}
	if receipt != nil {
		b = append(b, `,"receipt":`...)
		b = appendJSONString(b, *receipt)
	}
	b = append(b, `,"status":`...)
	b = appendJSONString(b, j.Status.String())
	b = field(append(b, ','), "updated_at_timestamp", secondsOf(j.UpdatedAt))
	return append(b, '}')
}
