package console_test

import (
	"testing"

	"github.com/opledger/opledger/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }
