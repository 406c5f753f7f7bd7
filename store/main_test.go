package store_test

import (
	"testing"

	"github.com/opledger/opledger/proof/pgtest"
)

// TestMain leaves pgtest's databases empty (no Migrate hook): the store's
// tests start from an empty database so that migrating one from scratch can
// be tested. Tests that need the schema call store.Migrate themselves.
func TestMain(m *testing.M) { pgtest.Main(m, pgtest.Options{}) }
