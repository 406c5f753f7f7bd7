package client_test

import (
	"testing"

	"github.com/opledger/opledger/proof/harness"
)

// TestMain starts the throwaway PostgreSQL the harness-backed tests use.
func TestMain(m *testing.M) { harness.Main(m) }
