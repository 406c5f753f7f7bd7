package console_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/proof/pgtest"
)

// TestApprovalShownOnTheDatabasesClock: an approval's end is the
// database's, and the console shows what is left of it against the
// database's clock, on the operation's page and on the list; with the
// database 90 s behind the server, an approval given a minute ago still
// has its minute.
func TestApprovalShownOnTheDatabasesClock(t *testing.T) {
	t.Parallel()
	dbURL, _ := pgtest.NewSkewedDatabase(t, -90*time.Second)
	w := newWorld(t, harness.Options{DatabaseURL: dbURL,
		ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_min", ApprovalTTL: time.Minute})})
	op := w.prepareAs(t, w.agent, "pay_min", "INV-sk", 700)
	b := w.browser(t)
	b.signIn(w.approver)
	form := b.decisionForm(op.GetId())
	form.Set("decision", "approve")
	_, page := b.post("/operations/"+op.GetId()+"/decision", form)
	require.Contains(t, page, "approved; expires in")
	require.NotContains(t, page, "approval expired")
	_, list := b.get("/")
	require.Contains(t, list, "approved; expires in")
	require.NotContains(t, list, "approval expired")
}
