// Package examples ships the demo tools file inside the binary, so that
// `opledger dev` works from any directory.
package examples

import _ "embed"

// ToolsYAML is examples/tools.yaml: the pay_invoice and send_email demo
// tools, pointing at the fake processor (OPLEDGER_FAKEPAY_URL).
//
//go:embed tools.yaml
var ToolsYAML []byte
