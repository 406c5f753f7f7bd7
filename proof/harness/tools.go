package harness

import (
	"bytes"
	"fmt"
	"time"
)

// Tool kinds for ToolSpec: what a tool sends to the fake processor.
const (
	// KindCharge POSTs pay_invoice-shaped args to /charges.
	KindCharge = "charge"
	// KindEmail POSTs send_email-shaped args to /emails.
	KindEmail = "email"
)

// ToolSpec describes one tool of a tools file built by ToolsYAML, so that a
// test can vary exactly the knobs it is about (timeout, attempts, approval
// TTL, dedupe and lookup) around the demo tools' argument schemas.
type ToolSpec struct {
	// Name is the tool name; version is always "1".
	Name string
	// Kind is KindCharge (the default) or KindEmail.
	Kind string
	// ApprovalTTL, when positive, makes approval required with this TTL.
	ApprovalTTL time.Duration
	// Timeout is the per-attempt executor timeout; the tools-file default
	// (10s) when 0.
	Timeout time.Duration
	// MaxAttempts is the executor's attempts per Send; 1 when 0.
	MaxAttempts int
	// DedupesKeys declares that the downstream honours Idempotency-Key.
	DedupesKeys bool
	// Lookup adds the processor's consistent lookup by key; only /charges
	// has one, so it is for KindCharge.
	Lookup bool
	// KeyRetention declares how long the downstream remembers keys; 0: forever.
	KeyRetention time.Duration
	// WebhookSecret accepts signed completion events for the tool.
	WebhookSecret string
	// URL replaces the POST URL, e.g. to point at a closed port.
	URL string
}

const chargeSchema = `
    args_schema:
      type: object
      properties:
        invoice_id: {type: string, minLength: 1, maxLength: 64}
        amount_minor: {type: integer, exclusiveMinimum: 0}
        currency: {type: string, pattern: "^[A-Z]{3}$"}
      required: [invoice_id, amount_minor, currency]
      additionalProperties: false
`

const emailSchema = `
    args_schema:
      type: object
      properties:
        to: {type: string, format: email, minLength: 3, maxLength: 320}
        subject: {type: string, maxLength: 998}
        body: {type: string, maxLength: 100000}
      required: [to, subject, body]
      additionalProperties: false
`

// ToolsYAML renders a tools file (for Options.ToolsYAML) whose URLs point
// at the Env's fake processor through ${OPLEDGER_FAKEPAY_URL}.
func ToolsYAML(specs ...ToolSpec) []byte {
	var b bytes.Buffer
	b.WriteString("tools:\n")
	for _, s := range specs {
		path, schema := "/charges", chargeSchema
		if s.Kind == KindEmail {
			path, schema = "/emails", emailSchema
		}
		url := s.URL
		if url == "" {
			url = "${OPLEDGER_FAKEPAY_URL}" + path
		}
		fmt.Fprintf(&b, "  - name: %s\n    version: \"1\"\n    effect: side_effect\n", s.Name)
		if s.ApprovalTTL > 0 {
			fmt.Fprintf(&b, "    approval:\n      required: true\n      ttl: %s\n", s.ApprovalTTL)
		}
		b.WriteString(schema)
		fmt.Fprintf(&b, "    executor:\n      type: http\n      url: %s\n      external_ref_field: id\n", url)
		fmt.Fprintf(&b, "      dedupes_keys: %t\n      max_attempts: %d\n", s.DedupesKeys, max(1, s.MaxAttempts))
		if s.Timeout > 0 {
			fmt.Fprintf(&b, "      timeout: %s\n", s.Timeout)
		}
		if s.WebhookSecret != "" {
			fmt.Fprintf(&b, "      webhook_secret: %s\n", s.WebhookSecret)
		}
		if s.KeyRetention > 0 {
			fmt.Fprintf(&b, "      key_retention: %s\n", s.KeyRetention)
		}
		if s.Lookup {
			fmt.Fprintf(&b, "      lookup_url: ${OPLEDGER_FAKEPAY_URL}%s?idempotency_key={key}\n      lookup_consistent: true\n", path)
		}
	}
	return b.Bytes()
}
