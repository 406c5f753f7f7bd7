package console_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
)

// screenshots, when set, is where TestBrowserApprovesOnce saves its
// screenshots of the list and the detail view (docs/console.md):
//
//	go test ./internal/console -run TestBrowserApprovesOnce -screenshots "$PWD/docs/console"
var screenshots = flag.String("screenshots", "", "directory for the console's screenshots (empty: none)")

// chromium finds a Chromium binary: $OPLEDGER_CHROMIUM, /usr/bin/chromium
// (Debian's package), or chromium or chromium-browser on the PATH.
func chromium() string {
	if p := os.Getenv("OPLEDGER_CHROMIUM"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// newBrowser starts a headless Chromium with a fresh profile and no
// network of its own beyond what the test serves, and returns a tab.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	bin := chromium()
	if bin == "" {
		const why = "no Chromium binary on this machine (apt-get install chromium, or set OPLEDGER_CHROMIUM): the console's browser test cannot run"
		if os.Getenv("OPLEDGER_REQUIRE_BROWSER") == "1" {
			t.Fatal(why + ", and OPLEDGER_REQUIRE_BROWSER=1")
		}
		t.Skip(why)
	}
	// A fresh profile. Chromium's helper processes may still be writing to
	// it for a moment after the browser is gone, so removing it retries.
	profile, err := os.MkdirTemp("", "opledger-chromium-")
	require.NoError(t, err)
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for os.RemoveAll(profile) != nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	})
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancelTimeout)
	require.NoError(t, chromedp.Run(ctx), "start Chromium")
	return ctx
}

func shoot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if *screenshots == "" {
		return
	}
	var png []byte
	require.NoError(t, chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)))
	require.NoError(t, os.MkdirAll(*screenshots, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(*screenshots, name), png, 0o644))
}

// TestBrowserApprovesOnce drives the console in a real headless Chromium:
// the approver signs in, sees the pending payment with its amount, opens
// it, and approves it; the agent's Execute then charges exactly once. A
// decision with a tampered fingerprint, and one without the CSRF token,
// are refused and change nothing.
func TestBrowserApprovesOnce(t *testing.T) {
	t.Parallel()
	ctx := newBrowser(t)
	w := newWorld(t, harness.Options{})
	op := w.prepare(t, "INV-2048", 4900)
	w.prepare(t, "INV-2049", 125000) // a second one, for the list

	// Sign in.
	var loc string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(w.url+"/"),
		chromedp.WaitVisible(`#key`, chromedp.ByQuery),
		chromedp.SendKeys(`#key`, w.approver, chromedp.ByQuery),
		chromedp.Submit(`#key`, chromedp.ByQuery),
		chromedp.WaitVisible(`table.ops`, chromedp.ByQuery),
		chromedp.Location(&loc),
	))
	require.Equal(t, w.url+"/", loc)

	// The list: both payments, amounts in minor units spelled out, and the
	// key nowhere in the page, the URL or a cookie the page can read.
	var list, cookieJS string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Text(`main`, &list, chromedp.ByQuery),
		chromedp.Evaluate(`document.cookie`, &cookieJS),
	))
	require.Contains(t, list, "Awaiting approval")
	require.Contains(t, list, "INV-2048")
	require.Contains(t, list, "minor units: EUR 49.00")
	require.Contains(t, list, "minor units: EUR 1,250.00")
	require.Contains(t, list, "an approval lasts 15 min once given")
	w.requireKeyNotIn(t, ctx)
	require.Empty(t, cookieJS, "the session cookie is HttpOnly")
	var cookies []*network.Cookie
	require.NoError(t, chromedp.Run(ctx, chromedp.ActionFunc(func(ctx context.Context) (err error) {
		cookies, err = network.GetCookies().Do(ctx)
		return err
	})))
	require.Len(t, cookies, 1)
	require.Equal(t, "opledger_session", cookies[0].Name)
	require.True(t, cookies[0].HTTPOnly)
	require.Equal(t, network.CookieSameSiteStrict, cookies[0].SameSite)
	shoot(t, ctx, "list.png")

	// The detail view shows the fingerprint the decision will carry.
	var fp, detail string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(fmt.Sprintf(`a[href="/operations/%s"]`, op.GetId()), chromedp.ByQuery),
		chromedp.WaitVisible(`#fingerprint`, chromedp.ByQuery),
		chromedp.Text(`#fingerprint`, &fp, chromedp.ByQuery),
		chromedp.Text(`main`, &detail, chromedp.ByQuery),
	))
	require.Equal(t, op.GetFingerprint(), strings.TrimSpace(fp))
	require.Contains(t, detail, "Event log")
	require.Contains(t, detail, "PREPARED")
	shoot(t, ctx, "detail.png")

	// A tampered fingerprint (as if the page had shown other arguments) is
	// refused and changes nothing.
	var problem string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.SetValue(`form.decision input[name=fingerprint]`, "v1:"+strings.Repeat("0", 64), chromedp.ByQuery),
		chromedp.SendKeys(`#reason`, "customer confirmed", chromedp.ByQuery),
		chromedp.Click(`button[value=approve]`, chromedp.ByQuery),
		chromedp.WaitVisible(`.problem`, chromedp.ByQuery),
		chromedp.Text(`.problem`, &problem, chromedp.ByQuery),
	))
	require.Contains(t, problem, "not the ones you reviewed")
	require.Contains(t, problem, "APPROVAL_FINGERPRINT_MISMATCH")
	w.requireState(t, op.GetId(), opledgerv1.State_STATE_AWAITING_APPROVAL)

	// A form without its CSRF token is refused and changes nothing.
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(w.url+"/operations/"+op.GetId()),
		chromedp.WaitVisible(`form.decision`, chromedp.ByQuery),
		chromedp.RemoveAttribute(`form.decision input[name=csrf]`, "name", chromedp.ByQuery),
		chromedp.Click(`button[value=approve]`, chromedp.ByQuery),
		chromedp.WaitVisible(`.problem`, chromedp.ByQuery),
		chromedp.Text(`.problem`, &problem, chromedp.ByQuery),
	))
	require.Contains(t, problem, "security token is missing or stale")
	w.requireState(t, op.GetId(), opledgerv1.State_STATE_AWAITING_APPROVAL)

	// The real decision.
	var flash string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(w.url+"/operations/"+op.GetId()),
		chromedp.WaitVisible(`form.decision`, chromedp.ByQuery),
		chromedp.SendKeys(`#reason`, "customer confirmed", chromedp.ByQuery),
		chromedp.Click(`button[value=approve]`, chromedp.ByQuery),
		chromedp.WaitVisible(`.flash`, chromedp.ByQuery),
		chromedp.Text(`.flash`, &flash, chromedp.ByQuery),
		chromedp.Text(`main`, &detail, chromedp.ByQuery),
	))
	require.Contains(t, flash, "Approved")
	require.Contains(t, detail, "APPROVED")
	require.Contains(t, detail, "customer confirmed")
	require.NotContains(t, detail, "form.decision")
	w.requireKeyNotIn(t, ctx)

	// The agent executes: exactly one charge.
	res, err := w.srv.Client.Execute(harness.Ctx(w.agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, res.GetOperation().GetState())
	require.Equal(t, 1, w.charges("INV-2048"))
	approval := res.GetOperation().GetApproval()
	require.Equal(t, opledgerv1.Decision_DECISION_APPROVE, approval.GetDecision())
	require.Equal(t, op.GetFingerprint(), approval.GetApprovedFingerprint())
	require.Equal(t, "customer confirmed", approval.GetReason())
	_, err = w.srv.Client.Execute(harness.Ctx(w.agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
	require.NoError(t, err)
	require.Equal(t, 1, w.charges("INV-2048"))
	w.requireLogsClean(t)
}

// requireKeyNotIn checks that the approver's key is neither in the page
// the browser shows nor in its URL.
func (w *world) requireKeyNotIn(t *testing.T, ctx context.Context) {
	t.Helper()
	var html, loc string
	require.NoError(t, chromedp.Run(ctx, chromedp.OuterHTML(`html`, &html, chromedp.ByQuery), chromedp.Location(&loc)))
	require.NotContains(t, html, w.approver)
	require.NotContains(t, loc, w.approver)
}
