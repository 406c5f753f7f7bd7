package client

import (
	"errors"
	"fmt"

	"github.com/opledger/opledger/clients/go/fingerprint"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// ErrFingerprintMismatch is returned by CheckFingerprint when the arguments
// do not hash to the operation's fingerprint.
var ErrFingerprintMismatch = errors.New("opledger: fingerprint does not match the operation's arguments")

// ErrFingerprintVersion is returned by CheckFingerprint for a fingerprint
// version this client cannot recompute; compare such fingerprints only as
// opaque strings.
var ErrFingerprintVersion = errors.New("opledger: unknown fingerprint version")

// Fingerprint computes the v1 fingerprint the server gives a Prepare of tool
// (in its resolved toolVersion, never "") with args for tenant, as documented
// in docs/fingerprint.md. args takes the shapes Prepare accepts.
func Fingerprint(tenant, tool, toolVersion string, args any) (string, error) {
	return fingerprint.Compute(fingerprint.Input{
		Method:      opledgerv1.LedgerService_Prepare_FullMethodName,
		Tenant:      tenant,
		Tool:        tool,
		ToolVersion: toolVersion,
		Args:        args,
	})
}

// CheckFingerprint recomputes op's fingerprint from its tenant, tool,
// version and args. An approver that shows op.Args to a person calls it
// before Approve, so that the approval is provably for what was shown.
func CheckFingerprint(op *opledgerv1.Operation) error {
	if v := fingerprint.VersionOf(op.GetFingerprint()); v != fingerprint.Version {
		return fmt.Errorf("%w %q", ErrFingerprintVersion, v)
	}
	var args any // a nil *structpb.Struct must reach fingerprint as nil, i.e. {}
	if op.GetArgs() != nil {
		args = op.GetArgs()
	}
	fp, err := Fingerprint(op.GetTenant(), op.GetTool(), op.GetToolVersion(), args)
	if err != nil {
		return err
	}
	if fp != op.GetFingerprint() {
		return ErrFingerprintMismatch
	}
	return nil
}
