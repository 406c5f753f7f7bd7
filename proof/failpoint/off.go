//go:build !failpoints

package failpoint

// Enabled reports whether this binary was built with failpoints.
const Enabled = false

// Inject does nothing in production builds.
func Inject(string) {}

// FreshDownstreamKeys is always false in production builds: deduplication
// cannot be switched off there.
func FreshDownstreamKeys() bool { return false }

// Defect is always false in production builds: fixed defects cannot be
// re-introduced there.
func Defect(string) bool { return false }
