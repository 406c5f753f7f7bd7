package fakepay

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const invoiceBody = `{"invoice_id":"INV-2048","amount_minor":4900,"currency":"EUR"}`

// fakeClock is a settable clock for retention and lag tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type fixture struct {
	srv    *Server
	url    string
	client *Client
	clock  *fakeClock
	hc     *http.Client
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	srv := New(Options{Now: clock.Now, Seed: 42})
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	hc := ts.Client()
	return &fixture{srv: srv, url: ts.URL, client: &Client{BaseURL: ts.URL, HTTP: hc}, clock: clock, hc: hc}
}

type answer struct {
	status   int
	body     []byte
	replayed bool
}

// post sends one POST. GetBody is cleared because Go's transport otherwise silently re-sends a
// POST that carries Idempotency-Key when a reused connection fails, which would hide the very
// faults under test.
func (f *fixture) post(t *testing.T, path, key, body string) (answer, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url+path, strings.NewReader(body))
	require.NoError(t, err)
	req.GetBody = nil
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := f.hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return answer{status: resp.StatusCode, body: b, replayed: resp.Header.Get("Idempotent-Replayed") == "true"}, nil
}

func (f *fixture) mustPost(t *testing.T, path, key, body string) answer {
	t.Helper()
	a, err := f.post(t, path, key, body)
	require.NoError(t, err)
	return a
}

func (f *fixture) get(t *testing.T, path string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, f.url+path, nil)
	require.NoError(t, err)
	resp, err := f.hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return answer{status: resp.StatusCode, body: b}
}

func decodeCharge(t *testing.T, b []byte) Charge {
	t.Helper()
	var c Charge
	require.NoError(t, json.Unmarshal(b, &c))
	return c
}

func errorType(t *testing.T, b []byte) string {
	t.Helper()
	var e errorBody
	require.NoError(t, json.Unmarshal(b, &e))
	return e.Error.Type
}

func TestCreateCharge(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := f.mustPost(t, "/charges", "k1", invoiceBody)
	require.Equal(t, http.StatusOK, a.status)
	require.False(t, a.replayed)
	c := decodeCharge(t, a.body)
	require.True(t, strings.HasPrefix(c.ID, "ch_"), c.ID)
	require.Equal(t, "charge", c.Object)
	require.Equal(t, "succeeded", c.Status)
	require.Equal(t, int64(4900), c.AmountMinor)
	require.Equal(t, "EUR", c.Currency)
	require.Equal(t, "INV-2048", c.InvoiceID)
	require.Equal(t, "k1", c.IdempotencyKey)
	require.Equal(t, int64(1_700_000_000), c.Created)
	require.JSONEq(t, invoiceBody, string(c.Request))
	require.Equal(t, []Charge{c}, f.srv.Charges())
}

func TestReplaySameKeySameBody(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	first := f.mustPost(t, "/charges", "k1", invoiceBody)
	// Same object, other key order and spacing: canonical JSON makes it the same request.
	second := f.mustPost(t, "/charges", "k1", `{ "currency":"EUR", "amount_minor":4900, "invoice_id":"INV-2048" }`)
	require.Equal(t, http.StatusOK, second.status)
	require.True(t, second.replayed)
	require.Equal(t, first.body, second.body)
	require.Len(t, f.srv.Charges(), 1)
}

func TestSameKeyOtherBodyIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.mustPost(t, "/charges", "k1", invoiceBody)
	a := f.mustPost(t, "/charges", "k1", `{"invoice_id":"INV-2048","amount_minor":9900,"currency":"EUR"}`)
	require.Equal(t, http.StatusUnprocessableEntity, a.status)
	require.Equal(t, "idempotency_error", errorType(t, a.body))
	require.Len(t, f.srv.Charges(), 1)
}

func TestInFlightTwinGetsConflict(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.srv.beforeCommit = func() {
		once.Do(func() { close(entered); <-release })
	}
	done := make(chan answer)
	go func() {
		a, _ := f.post(t, "/charges", "k1", invoiceBody)
		done <- a
	}()
	<-entered
	a := f.mustPost(t, "/charges", "k1", invoiceBody)
	require.Equal(t, http.StatusConflict, a.status)
	require.Equal(t, "idempotency_conflict", errorType(t, a.body))
	// A lookup does not see a charge that is not committed yet.
	require.Equal(t, http.StatusNotFound, f.get(t, "/charges?idempotency_key=k1").status)
	close(release)
	first := <-done
	require.Equal(t, http.StatusOK, first.status)
	require.Len(t, f.srv.Charges(), 1)
}

func TestValidationFailureStoresNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, body := range []string{`[1,2]`, `"x"`, `null`, `{"a":1} {"b":2}`, `{`, ``} {
		a := f.mustPost(t, "/charges", "k1", body)
		require.Equal(t, http.StatusBadRequest, a.status, body)
		require.Equal(t, "invalid_request_error", errorType(t, a.body))
	}
	a := f.mustPost(t, "/charges", "k1", invoiceBody)
	require.Equal(t, http.StatusOK, a.status)
	require.False(t, a.replayed)
	require.Len(t, f.srv.Charges(), 1)
}

func TestNoKeyCreatesEveryTime(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.mustPost(t, "/charges", "", invoiceBody)
	f.mustPost(t, "/charges", "", invoiceBody)
	require.Len(t, f.srv.Charges(), 2)
}

func TestLookupsAndList(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c1 := decodeCharge(t, f.mustPost(t, "/charges", "k1", invoiceBody).body)
	c2 := decodeCharge(t, f.mustPost(t, "/charges", "k2", `{"invoice_id":"INV-2","amount_minor":1,"currency":"USD"}`).body)

	a := f.get(t, "/charges?idempotency_key=k2")
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, c2, decodeCharge(t, a.body))
	a = f.get(t, "/charges?idempotency_key=nope")
	require.Equal(t, http.StatusNotFound, a.status)
	require.Equal(t, "not_found", errorType(t, a.body))

	a = f.get(t, "/charges/"+c1.ID)
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, c1, decodeCharge(t, a.body))
	require.Equal(t, http.StatusNotFound, f.get(t, "/charges/ch_missing").status)

	var list struct{ Data []Charge }
	a = f.get(t, "/charges")
	require.Equal(t, http.StatusOK, a.status)
	require.NoError(t, json.Unmarshal(a.body, &list))
	require.Equal(t, []Charge{c1, c2}, list.Data)

	ctx := t.Context()
	got, err := f.client.Charges(ctx)
	require.NoError(t, err)
	require.Equal(t, []Charge{c1, c2}, got)
	ch, found, err := f.client.ChargeByKey(ctx, "k1")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, c1, ch)
	_, found, err = f.client.ChargeByKey(ctx, "nope")
	require.NoError(t, err)
	require.False(t, found)
	ch, found, err = f.client.Charge(ctx, c2.ID)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, c2, ch)
}

func TestEmailsNeverDedupe(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	body := `{"to":"a@example.com","subject":"Hi","body":"Hello"}`
	a1 := f.mustPost(t, "/emails", "k1", body)
	a2 := f.mustPost(t, "/emails", "k1", body)
	require.Equal(t, http.StatusOK, a1.status)
	require.Equal(t, http.StatusOK, a2.status)
	require.False(t, a2.replayed)
	var e Email
	require.NoError(t, json.Unmarshal(a1.body, &e))
	require.True(t, strings.HasPrefix(e.ID, "em_"))
	require.Equal(t, "email", e.Object)
	require.Equal(t, "a@example.com", e.To)
	require.Equal(t, "Hi", e.Subject)
	require.Equal(t, "k1", e.IdempotencyKey)

	emails, err := f.client.Emails(t.Context())
	require.NoError(t, err)
	require.Len(t, emails, 2)
	require.NotEqual(t, emails[0].ID, emails[1].ID)
	require.Equal(t, emails, f.srv.Emails())
	require.Equal(t, http.StatusBadRequest, f.mustPost(t, "/emails", "", `[]`).status)
}

func TestFailBeforeCommit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.SetFaults(Faults{FailBeforeCommit: Trigger{Next: 1}})
	a := f.mustPost(t, "/charges", "k1", invoiceBody)
	require.Equal(t, http.StatusInternalServerError, a.status)
	require.Empty(t, f.srv.Charges())
	require.Equal(t, http.StatusNotFound, f.get(t, "/charges?idempotency_key=k1").status)
	require.Equal(t, 0, f.srv.Faults().FailBeforeCommit.Next)

	// The key was not stored, so the retry executes afresh rather than replaying the 500.
	a = f.mustPost(t, "/charges", "k1", invoiceBody)
	require.Equal(t, http.StatusOK, a.status)
	require.False(t, a.replayed)
	require.Len(t, f.srv.Charges(), 1)

	f.srv.SetFaults(Faults{FailBeforeCommit: Trigger{Next: 1}})
	require.Equal(t, http.StatusInternalServerError, f.mustPost(t, "/emails", "", `{"to":"x"}`).status)
	require.Empty(t, f.srv.Emails())
}

func TestFailAfterCommit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.SetFaults(Faults{FailAfterCommit: Trigger{Next: 1}})
	a := f.mustPost(t, "/charges", "k1", invoiceBody)
	require.Equal(t, http.StatusInternalServerError, a.status)
	charges := f.srv.Charges()
	require.Len(t, charges, 1)

	// The key holds the 200 result, which the retry gets.
	a = f.mustPost(t, "/charges", "k1", invoiceBody)
	require.Equal(t, http.StatusOK, a.status)
	require.True(t, a.replayed)
	require.Equal(t, charges[0].ID, decodeCharge(t, a.body).ID)
	require.Len(t, f.srv.Charges(), 1)

	f.srv.SetFaults(Faults{FailAfterCommit: Trigger{Next: 1}})
	require.Equal(t, http.StatusInternalServerError, f.mustPost(t, "/emails", "", `{"to":"x"}`).status)
	require.Len(t, f.srv.Emails(), 1)
}

func TestDropAfterCommit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.SetFaults(Faults{DropAfterCommit: Trigger{Next: 1}})
	_, err := f.post(t, "/charges", "k1", invoiceBody)
	require.Error(t, err)
	charges := f.srv.Charges()
	require.Len(t, charges, 1)

	a := f.get(t, "/charges?idempotency_key=k1")
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, charges[0].ID, decodeCharge(t, a.body).ID)
	a = f.mustPost(t, "/charges", "k1", invoiceBody)
	require.Equal(t, http.StatusOK, a.status)
	require.True(t, a.replayed)
	require.Len(t, f.srv.Charges(), 1)

	f.srv.SetFaults(Faults{DropAfterCommit: Trigger{Next: 1}})
	_, err = f.post(t, "/emails", "", `{"to":"x"}`)
	require.Error(t, err)
	require.Len(t, f.srv.Emails(), 1)
}

func TestDropResetsConnection(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.SetFaults(Faults{DropAfterCommit: Trigger{Next: 1}})
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /charges HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: "+strconv.Itoa(len(invoiceBody))+"\r\n\r\n"+invoiceBody)
	require.NoError(t, err)
	n, err := conn.Read(make([]byte, 100))
	require.Zero(t, n)
	require.Error(t, err)
	require.Len(t, f.srv.Charges(), 1)
}

func TestNoKeySupport(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.SetFaults(Faults{NoKeySupport: true})
	a1 := f.mustPost(t, "/charges", "k1", invoiceBody)
	a2 := f.mustPost(t, "/charges", "k1", `{"other":true}`)
	require.Equal(t, http.StatusOK, a1.status)
	require.Equal(t, http.StatusOK, a2.status)
	require.False(t, a2.replayed)
	require.Len(t, f.srv.Charges(), 2)
	require.Equal(t, http.StatusNotFound, f.get(t, "/charges?idempotency_key=k1").status)
}

func TestKeyRetention(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.SetFaults(Faults{KeyRetention: time.Hour})
	first := decodeCharge(t, f.mustPost(t, "/charges", "k1", invoiceBody).body)
	f.clock.Advance(59 * time.Minute)
	a := f.mustPost(t, "/charges", "k1", invoiceBody)
	require.True(t, a.replayed)
	require.Equal(t, http.StatusOK, f.get(t, "/charges?idempotency_key=k1").status)

	f.clock.Advance(time.Minute)
	require.Equal(t, http.StatusNotFound, f.get(t, "/charges?idempotency_key=k1").status)
	a = f.mustPost(t, "/charges", "k1", invoiceBody)
	require.Equal(t, http.StatusOK, a.status)
	require.False(t, a.replayed)
	second := decodeCharge(t, a.body)
	require.NotEqual(t, first.ID, second.ID)
	require.Len(t, f.srv.Charges(), 2)
	// The retry stored the key afresh.
	a = f.get(t, "/charges?idempotency_key=k1")
	require.Equal(t, second.ID, decodeCharge(t, a.body).ID)
}

func TestLookupLag(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.SetFaults(Faults{LookupLag: 5 * time.Second})
	c := decodeCharge(t, f.mustPost(t, "/charges", "k1", invoiceBody).body)
	require.Equal(t, http.StatusNotFound, f.get(t, "/charges?idempotency_key=k1").status)
	// Only the lookup by key lags.
	require.Equal(t, http.StatusOK, f.get(t, "/charges/"+c.ID).status)
	f.clock.Advance(5 * time.Second)
	a := f.get(t, "/charges?idempotency_key=k1")
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, c.ID, decodeCharge(t, a.body).ID)
}

func TestDelayHoldsRequestInFlight(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.SetFaults(Faults{Delay: 2 * time.Second})
	done := make(chan answer)
	go func() {
		a, _ := f.post(t, "/charges", "k1", invoiceBody)
		done <- a
	}()
	require.Eventually(t, func() bool {
		f.srv.mu.Lock()
		defer f.srv.mu.Unlock()
		return f.srv.keys["k1"] != nil
	}, 10*time.Second, time.Millisecond)
	a := f.mustPost(t, "/charges", "k1", invoiceBody)
	require.Equal(t, http.StatusConflict, a.status)
	require.Equal(t, http.StatusOK, (<-done).status)
	require.Len(t, f.srv.Charges(), 1)
}

func TestTriggerRate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.SetFaults(Faults{FailBeforeCommit: Trigger{Next: 2, Rate: 1}})
	for range 4 {
		require.Equal(t, http.StatusInternalServerError, f.mustPost(t, "/charges", "", invoiceBody).status)
	}
	f.srv.SetFaults(Faults{FailBeforeCommit: Trigger{Next: 2, Rate: 0}})
	statuses := []int{}
	for range 4 {
		statuses = append(statuses, f.mustPost(t, "/charges", "", invoiceBody).status)
	}
	require.Equal(t, []int{500, 500, 200, 200}, statuses)

	// With a rate strictly between 0 and 1 both outcomes occur (seeded, so deterministic).
	f.srv.SetFaults(Faults{FailBeforeCommit: Trigger{Rate: 0.5}})
	seen := map[int]int{}
	for range 40 {
		seen[f.mustPost(t, "/charges", "", invoiceBody).status]++
	}
	require.Positive(t, seen[200])
	require.Positive(t, seen[500])
}

func TestAdminFaults(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	want := Faults{
		Delay:            200 * time.Millisecond,
		FailBeforeCommit: Trigger{Next: 1},
		FailAfterCommit:  Trigger{Rate: 0.25},
		DropAfterCommit:  Trigger{Next: 3, Rate: 0.5},
		NoKeySupport:     true,
		KeyRetention:     time.Hour,
		LookupLag:        2 * time.Second,
	}
	require.NoError(t, f.client.SetFaults(ctx, want))
	got, err := f.client.Faults(ctx)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, want, f.srv.Faults())

	a := f.get(t, "/admin/faults")
	var m map[string]any
	require.NoError(t, json.Unmarshal(a.body, &m))
	require.Equal(t, "200ms", m["delay"])
	require.Equal(t, "1h0m0s", m["key_retention"])

	require.NoError(t, f.client.ClearFaults(ctx))
	got, err = f.client.Faults(ctx)
	require.NoError(t, err)
	require.Equal(t, Faults{}, got)

	for _, bad := range []string{`{"delai":"1s"}`, `{"delay":"soon"}`, `{"delay":"-1s"}`,
		`{"fail_before_commit":{"rate":2}}`, `{"drop_after_commit":{"next":-1}}`, `[]`} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, f.url+"/admin/faults", strings.NewReader(bad))
		require.NoError(t, err)
		resp, err := f.hc.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
	}
	err = f.client.SetFaults(ctx, Faults{Delay: -1})
	apiErr, ok := err.(*APIError)
	require.True(t, ok, "%v", err)
	require.Equal(t, http.StatusBadRequest, apiErr.Status)
	require.Equal(t, Faults{}, f.srv.Faults())
}

func TestFaultsJSON(t *testing.T) {
	t.Parallel()
	var fl Faults
	require.NoError(t, json.Unmarshal([]byte(`{"delay":"1.5s","lookup_lag":1000,"key_retention":null,"fail_after_commit":{"next":2}}`), &fl))
	require.Equal(t, Faults{Delay: 1500 * time.Millisecond, LookupLag: time.Microsecond, FailAfterCommit: Trigger{Next: 2}}, fl)
	b, err := json.Marshal(Faults{Delay: 200 * time.Millisecond})
	require.NoError(t, err)
	require.JSONEq(t, `{"delay":"200ms","fail_before_commit":{"next":0,"rate":0},"fail_after_commit":{"next":0,"rate":0},
		"drop_after_commit":{"next":0,"rate":0},"no_key_support":false,"key_retention":"0s","lookup_lag":"0s",
		"redirect_after_commit":{"next":0,"rate":0},"refuse_replay":{"next":0,"rate":0},"key_race":"0s",
		"lookup_miss":{"next":0,"rate":0},"refuse_after_commit":{"next":0,"rate":0}}`, string(b))
	require.NoError(t, json.Unmarshal([]byte(`{"key_race":"50ms","lookup_miss":{"rate":0.5},"refuse_after_commit":{"next":1}}`), &fl))
	require.Equal(t, Faults{KeyRace: 50 * time.Millisecond, LookupMiss: Trigger{Rate: 0.5}, RefuseAfterCommit: Trigger{Next: 1}}, fl)
	require.Error(t, Faults{KeyRace: -1}.Validate())
	require.Error(t, Faults{LookupMiss: Trigger{Rate: 2}}.Validate())
}

// TestRedirectAndRefusedReplay: the two faults that make a downstream's
// answer look like a refusal after it took effect.
func TestRedirectAndRefusedReplay(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.SetFaults(Faults{RedirectAfterCommit: Trigger{Next: 1}, RefuseReplay: Trigger{Next: 1}})
	body := `{"invoice_id":"INV-1","amount_minor":100,"currency":"EUR"}`
	post := func() *http.Response {
		req, err := http.NewRequest(http.MethodPost, f.url+"/charges", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k1")
		req.Header.Set("Content-Type", "application/json")
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	first := post()
	require.Equal(t, http.StatusSeeOther, first.StatusCode)
	require.Len(t, f.srv.Charges(), 1, "the charge is committed before the redirect")
	require.Equal(t, "/charges/"+f.srv.Charges()[0].ID, first.Header.Get("Location"))
	require.Equal(t, http.StatusBadRequest, post().StatusCode, "the replay is refused")
	require.Equal(t, http.StatusOK, post().StatusCode, "then replayed")
	require.Len(t, f.srv.Charges(), 1)
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func TestReset(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.mustPost(t, "/charges", "k1", invoiceBody)
	f.mustPost(t, "/emails", "k1", `{"to":"x"}`)
	require.NoError(t, f.client.SetFaults(ctx, Faults{LookupLag: time.Hour}))
	require.NoError(t, f.client.Reset(ctx))
	require.Empty(t, f.srv.Charges())
	require.Empty(t, f.srv.Emails())
	require.Equal(t, Faults{}, f.srv.Faults())
	a := f.mustPost(t, "/charges", "k1", `{"different":"body"}`)
	require.Equal(t, http.StatusOK, a.status, "the key was forgotten")
	f.srv.Reset()
	require.Empty(t, f.srv.Charges())
}

func TestConcurrentSameKeyMakesOneCharge(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 50
	var wg sync.WaitGroup
	answers := make([]answer, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			a, err := f.post(t, "/charges", "same-key", invoiceBody)
			if err == nil {
				answers[i] = a
			}
		})
	}
	close(start)
	wg.Wait()
	charges := f.srv.Charges()
	require.Len(t, charges, 1)
	for _, a := range answers {
		switch a.status {
		case http.StatusOK:
			require.Equal(t, charges[0].ID, decodeCharge(t, a.body).ID)
		case http.StatusConflict:
		default:
			t.Fatalf("unexpected answer %d %s", a.status, a.body)
		}
	}
}

func TestConcurrentDistinctKeys(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.SetFaults(Faults{FailAfterCommit: Trigger{Rate: 0.3}})
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			key := "key-" + strconv.Itoa(i)
			// Retry until a 200: the after-commit 500s must never cause a second charge.
			for range 100 {
				a, err := f.post(t, "/charges", key, invoiceBody)
				if err == nil && a.status == http.StatusOK {
					return
				}
			}
			t.Errorf("key %d never got a 200", i)
		})
	}
	wg.Wait()
	charges := f.srv.Charges()
	require.Len(t, charges, n)
	keys := map[string]bool{}
	for _, c := range charges {
		keys[c.IdempotencyKey] = true
	}
	require.Len(t, keys, n)
}

func TestServeStopsOnCancel(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	srv := New(Options{})
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ctx, ln) }()
	c := &Client{BaseURL: "http://" + ln.Addr().String()}
	require.NoError(t, c.Reset(ctx))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/charges", bytes.NewReader([]byte(invoiceBody)))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Len(t, srv.Charges(), 1)
	cancel()
	require.NoError(t, <-errc)
	_, err = (&Client{BaseURL: c.BaseURL}).Charges(t.Context())
	require.Error(t, err)
}

func TestListenAndServeBadAddress(t *testing.T) {
	t.Parallel()
	require.Error(t, ListenAndServe(t.Context(), "127.0.0.1:not-a-port", nil))
}

func TestKeyDigest(t *testing.T) {
	t.Parallel()
	require.Empty(t, KeyDigest(""))
	d := KeyDigest("secret-key")
	require.Len(t, d, 12)
	require.NotContains(t, d, "secret")
	require.Equal(t, d, KeyDigest("secret-key"))
}

func BenchmarkCreateCharge(b *testing.B) {
	srv := New(Options{Seed: 1})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(invoiceBody))
			req.Header.Set("Idempotency-Key", "k"+strconv.Itoa(i%1000))
			srv.ServeHTTP(httptest.NewRecorder(), req)
		}
	})
}

// TestRecordRequests: with RecordRequests every POST is recorded with its key, source, body and
// answer, including the ones a deduplicating server answered without a new effect; without it
// nothing is.
func TestRecordRequests(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	srv := New(Options{Now: clock.Now, Seed: 7, RecordRequests: true, SourceHeader: "X-Sender"})
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	post := func(path, key, body string) int {
		req, err := http.NewRequest(http.MethodPost, ts.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("X-Sender", "s2")
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		clock.Advance(time.Second)
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, post("/charges", "k1", invoiceBody))
	require.Equal(t, http.StatusOK, post("/charges", "k1", invoiceBody), "replayed")
	srv.SetFaults(Faults{RefuseReplay: Trigger{Next: 1}, RedirectAfterCommit: Trigger{Next: 1}})
	require.Equal(t, http.StatusBadRequest, post("/charges", "k1", invoiceBody))
	require.Equal(t, http.StatusSeeOther, post("/charges", "k2", invoiceBody))
	require.Equal(t, http.StatusUnprocessableEntity, post("/charges", "k2", `{"invoice_id":"other","amount_minor":1,"currency":"EUR"}`))
	require.Equal(t, http.StatusBadRequest, post("/charges", "k3", `[1]`))
	require.Equal(t, http.StatusOK, post("/emails", "k1", `{"to":"a@example.com"}`))

	got := srv.Requests()
	require.Len(t, got, 7)
	answers := make([]string, len(got))
	for i, r := range got {
		answers[i] = r.Answer
		require.Equal(t, "s2", r.Source)
		require.Equal(t, time.Unix(1_700_000_000+int64(i), 0), r.Received)
	}
	require.Equal(t, []string{AnswerCreated, AnswerReplayed, AnswerRefusedReplay, AnswerRedirected, AnswerKeyReused, AnswerInvalid, AnswerCreated}, answers)
	require.Equal(t, "k1", got[0].IdempotencyKey)
	require.Equal(t, "/charges", got[0].Path)
	require.Equal(t, "/emails", got[6].Path)
	require.JSONEq(t, invoiceBody, string(got[0].Body))
	require.Equal(t, http.StatusSeeOther, got[3].Status)
	require.Len(t, srv.Charges(), 2, "seven requests, two charges")
	require.Equal(t, map[string]int{AnswerCreated: 2, AnswerReplayed: 1, AnswerRefusedReplay: 1, AnswerRedirected: 1, AnswerKeyReused: 1, AnswerInvalid: 1},
		srv.AnswerCounts())

	// Not recording is the default.
	f := newFixture(t)
	f.mustPost(t, "/charges", "k1", invoiceBody)
	require.Empty(t, f.srv.Requests())
}

// TestRecordRequestsInFlight: a request held in flight is recorded when it arrives, and a twin
// that finds it in flight is recorded as in_progress.
func TestRecordRequestsInFlight(t *testing.T) {
	t.Parallel()
	srv := New(Options{Seed: 7, RecordRequests: true})
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	srv.beforeCommit = func() { once.Do(func() { close(entered); <-release }) }
	post := func() int {
		req, err := http.NewRequest(http.MethodPost, ts.URL+"/charges", strings.NewReader(invoiceBody))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	done := make(chan int)
	go func() { done <- post() }()
	<-entered
	require.Len(t, srv.Requests(), 1)
	require.Empty(t, srv.Requests()[0].Answer, "still in flight")
	require.Equal(t, http.StatusConflict, post())
	close(release)
	require.Equal(t, http.StatusOK, <-done)
	got := srv.Requests()
	require.Equal(t, AnswerCreated, got[0].Answer)
	require.Equal(t, AnswerInProgress, got[1].Answer)
}

// TestValidationRefusesAmount: an amount_minor that is not a positive
// integer is refused 400 before anything is stored, key included; a charge
// without one is still made (the fake processor checks what it is given).
func TestValidationRefusesAmount(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, body := range []string{`{"amount_minor":0}`, `{"amount_minor":-5,"currency":"EUR"}`, `{"amount_minor":49.5}`, `{"amount_minor":"x"}`} {
		a := f.mustPost(t, "/charges", "k1", body)
		require.Equal(t, http.StatusBadRequest, a.status, body)
		require.Equal(t, "invalid_request_error", errorType(t, a.body))
	}
	require.Empty(t, f.srv.Charges())
	require.Equal(t, http.StatusNotFound, f.get(t, "/charges?idempotency_key=k1").status)
	a := f.mustPost(t, "/charges", "k1", invoiceBody)
	require.Equal(t, http.StatusOK, a.status)
	require.False(t, a.replayed, "the refused requests left no key behind")
	require.Equal(t, http.StatusOK, f.mustPost(t, "/charges", "k2", `{"other":true}`).status)
}

// TestKeyRace: with the read-then-insert race, twins with one key that
// arrive within the window each make a charge; one after the other, the
// key still replays. Without the fault the same twins make one charge
// (TestConcurrentSameKeyMakesOneCharge).
func TestKeyRace(t *testing.T) {
	t.Parallel()
	srv := New(Options{Seed: 42, RecordRequests: true})
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	f := &fixture{srv: srv, url: ts.URL, hc: ts.Client()}
	srv.SetFaults(Faults{KeyRace: time.Second})
	first := make(chan answer, 1)
	go func() {
		a, _ := f.post(t, "/charges", "k1", invoiceBody)
		first <- a
	}()
	require.Eventually(t, func() bool { return len(srv.Requests()) == 1 }, 10*time.Second, time.Millisecond)
	second := f.mustPost(t, "/charges", "k1", invoiceBody)
	a := <-first
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, http.StatusOK, second.status)
	require.False(t, second.replayed)
	require.NotEqual(t, decodeCharge(t, a.body).ID, decodeCharge(t, second.body).ID, "two charges under one key")
	require.Len(t, srv.Charges(), 2)
	third := f.mustPost(t, "/charges", "k1", invoiceBody)
	require.True(t, third.replayed, "a request after the window replays")
	require.Len(t, srv.Charges(), 2)
}

// TestLookupMiss: a lookup by key that fires answers 404 for a charge the
// server holds; the others find it, and POST still replays.
func TestLookupMiss(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := decodeCharge(t, f.mustPost(t, "/charges", "k1", invoiceBody).body)
	f.srv.SetFaults(Faults{LookupMiss: Trigger{Next: 2}})
	require.Equal(t, http.StatusNotFound, f.get(t, "/charges?idempotency_key=k1").status)
	require.Equal(t, http.StatusNotFound, f.get(t, "/charges?idempotency_key=k1").status)
	a := f.get(t, "/charges?idempotency_key=k1")
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, c.ID, decodeCharge(t, a.body).ID)
	// A lookup that would find nothing does not consume a firing.
	f.srv.SetFaults(Faults{LookupMiss: Trigger{Next: 1}})
	require.Equal(t, http.StatusNotFound, f.get(t, "/charges?idempotency_key=never").status)
	require.Equal(t, 1, f.srv.Faults().LookupMiss.Next)
	f.srv.SetFaults(Faults{LookupMiss: Trigger{Rate: 1}})
	require.Equal(t, http.StatusNotFound, f.get(t, "/charges?idempotency_key=k1").status)
	require.True(t, f.mustPost(t, "/charges", "k1", invoiceBody).replayed, "POST still knows the key")
}

// TestRefuseAfterCommit: the charge is made and its key stored, and the
// answer is a 402; a retry replays the 200, a lookup finds the charge.
func TestRefuseAfterCommit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.SetFaults(Faults{RefuseAfterCommit: Trigger{Next: 1}})
	a := f.mustPost(t, "/charges", "k1", invoiceBody)
	require.Equal(t, http.StatusPaymentRequired, a.status)
	require.Equal(t, "card_error", errorType(t, a.body))
	charges := f.srv.Charges()
	require.Len(t, charges, 1, "the charge was made before the refusal")
	lookup := f.get(t, "/charges?idempotency_key=k1")
	require.Equal(t, http.StatusOK, lookup.status)
	require.Equal(t, charges[0].ID, decodeCharge(t, lookup.body).ID)
	retry := f.mustPost(t, "/charges", "k1", invoiceBody)
	require.Equal(t, http.StatusOK, retry.status)
	require.True(t, retry.replayed)
	f.srv.SetFaults(Faults{RefuseAfterCommit: Trigger{Next: 1}})
	require.Equal(t, http.StatusPaymentRequired, f.mustPost(t, "/emails", "", `{"to":"x"}`).status)
	require.Len(t, f.srv.Emails(), 1, "the e-mail was sent before the refusal")
}
