//go:build failpoints

package main

import (
	"github.com/opledger/opledger/proof/failpoint"
	"github.com/opledger/opledger/service"
)

// installFaults decorates the service this chaos binary (-tags failpoints)
// wires with the failpoints and the defect switches its environment asks
// for (OPLEDGER_FAILPOINTS, OPLEDGER_UNSAFE_*): the chaos suite's servers
// and the process tests crash and stall there, and the control runs put
// their defect back. The product names none of them (proof/failpoint).
func installFaults(o *service.Options) { failpoint.Install(o) }
