//go:build !failpoints

package main

import "github.com/opledger/opledger/service"

// installFaults installs nothing in a release build: it has no failpoints
// and no defect switches (faults.go is the chaos build's).
func installFaults(*service.Options) {}
