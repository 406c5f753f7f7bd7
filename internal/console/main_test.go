package console_test

import (
	"testing"

	"github.com/opledger/opledger/proof/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }
