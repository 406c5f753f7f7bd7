package console_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/proof/pgtest"
)

// TestListTimesAsOfTheDatabasesClock: the list computes every age and time
// left against the database's clock, so the moment it says they are "as of"
// must be the database's too. With the database an hour behind the server,
// an operation prepared just now is "0 s" old as of now on the database's
// clock, not as of an hour later.
func TestListTimesAsOfTheDatabasesClock(t *testing.T) {
	t.Parallel()
	dbURL, _ := pgtest.NewSkewedDatabase(t, -time.Hour)
	w := newWorld(t, harness.Options{DatabaseURL: dbURL})
	w.prepareAs(t, w.agent, "pay_invoice", "INV-asof", 700)
	b := w.browser(t)
	b.signIn(w.approver)
	_, list := b.get("/")
	stamps := regexp.MustCompile(`Times as of (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC)`).FindStringSubmatch(list)
	require.NotNil(t, stamps, list)
	asOf, err := time.Parse("2006-01-02 15:04:05 UTC", stamps[1])
	require.NoError(t, err)
	created := regexp.MustCompile(`<span class="muted">(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC)</span>`).FindStringSubmatch(list)
	require.NotNil(t, created, list)
	at, err := time.Parse("2006-01-02 15:04:05 UTC", created[1])
	require.NoError(t, err)
	require.Less(t, asOf.Sub(at).Abs(), time.Minute,
		"the list says its times are as of %s, but it measured them against the database's clock (the operation, created at %s, is shown as just prepared)", asOf, at)
}
