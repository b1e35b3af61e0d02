package jsoncanon

import "testing"

// benchPayload is a ~2 KB job payload with unsorted keys, whitespace,
// escapes, non-ASCII text, floats and a secret-like member.
const benchPayload = `{
  "report_id": 42, "kind": "monthly", "requested_by": {"name": "Zoë Ångström", "email": "zoe@example.com", "api_key": "sk_live_abc"},
  "period": {"to": "2026-09-30", "from": "2026-09-01"},
  "options": {"currency": "EUR", "include_tax": true, "rounding": 0.01, "format": "pdf", "locale": "de-DE", "notes": null},
  "items": [
    {"sku": "A-1001", "qty": 2, "price": 9.99, "desc": "Widget \"deluxe\"\n2-pack", "tags": ["hw", "blue"]},
    {"sku": "B-2002", "qty": 1, "price": 1.5E2, "desc": "Gadget <small> & co", "tags": []},
    {"sku": "C-3003", "qty": 10, "price": 0.25, "desc": "Bolt M4\u00d720", "tags": ["hw"]},
    {"sku": "D-4004", "qty": 3, "price": 1200.0, "desc": "Service – on site", "tags": ["svc", "eu"]},
    {"sku": "E-5005", "qty": 7, "price": 3.3333333333333335, "desc": "日本語の説明", "tags": ["jp"]},
    {"sku": "F-6006", "qty": 1, "price": 1e3, "desc": "Tab\tseparated", "tags": ["misc"]},
    {"sku": "G-7007", "qty": 4, "price": 12.5, "desc": "Emoji 😀 pack", "tags": ["fun", "x"]},
    {"sku": "H-8008", "qty": 6, "price": 99.95, "desc": "Cable 2m", "tags": ["hw", "cable"]}
  ],
  "totals": {"tax": 123.456, "net": 1987.65, "gross": 2111.106, "lines": 8},
  "history": [
    {"at": "2026-09-01T10:00:00Z", "event": "created", "by": "system"},
    {"at": "2026-09-02T11:30:00Z", "event": "updated", "by": "zoe", "changes": {"qty": [1, 2], "price": [9.49, 9.99]}},
    {"at": "2026-09-03T08:15:00Z", "event": "approved", "by": "manager", "comment": "looks good \u2014 ship it"}
  ],
  "metadata": {"source": "erp", "version": 3, "trace": "0af7651916cd43dd8448eb211c80319c", "retry": false, "priority": -1,
    "labels": {"team": "finance", "region": "eu-west", "cost_center": "CC-1234", "env": "prod"}},
  "attachments": [{"name": "invoice.pdf", "size": 48213, "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}],
  "padding": "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua."
}`

func BenchmarkCanonicalize(b *testing.B) {
	in := []byte(benchPayload)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Canonicalize(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCanonicalizeRedacted(b *testing.B) {
	in := []byte(benchPayload)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CanonicalizeRedacted(in); err != nil {
			b.Fatal(err)
		}
	}
}
