package server

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/holdfast/holdfast/server/service"
)

// BenchmarkDecodeStrict measures decoding typical bodies, with the
// encoding/json decoder that decodeStrict replaced as a reference.
func BenchmarkDecodeStrict(b *testing.B) {
	for _, c := range []struct {
		name     string
		body     string
		newValue func() any
	}{
		{"acquire", `{"namespace":"ns_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","key":"invoice:2026-09-05","ttl_seconds":60,"fingerprint":"charge-order-501"}`, newOf[service.AcquireLeaseRequest]()},
		{"enqueue", `{"job_key":"report:42","payload":{"report_id":42,"items":[1,2,3,{"a":"b","c":[true,false,null]}],"note":"some text here"}}`, newOf[service.EnqueueRequest]()},
	} {
		body := []byte(c.body)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := decodeStrict(body, c.newValue()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d := json.NewDecoder(bytes.NewReader(body))
				d.DisallowUnknownFields()
				if err := d.Decode(c.newValue()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
