package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/proof/harness"
)

// TestNotificationLinkOpensTheOperationAfterSignIn: an approval
// notification's console_url is <console>/operations/<id> ("opens the
// operation in the approval console"). An approver who follows it without a
// session (the usual case from chat: sessions end after 30 minutes idle, and
// the SameSite=Strict cookie is not sent on a navigation from another site)
// signs in and lands on that operation, not on the front page.
func TestNotificationLinkOpensTheOperationAfterSignIn(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	op := w.prepare(t, "INV-LINK", 4900)
	b := w.browser(t)
	status, page := b.get("/operations/" + op.GetId()) // the notification's link, signed out
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "/login", b.last.Request.URL.Path)
	form := url.Values{"key": {w.approver}}
	for _, m := range hidden.FindAllStringSubmatch(page, -1) { // what the sign-in form posts
		form.Set(m[1], m[2])
	}
	status, page = b.post("/login", form)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "/operations/"+op.GetId(), b.last.Request.URL.Path, "signing in from the link lands on the operation")
	require.Contains(t, page, op.GetFingerprint())
}
