//go:build !failpoints

package failpoint

// Enabled reports whether this binary was built with failpoints.
const Enabled = false

// Inject does nothing in production builds.
func Inject(string) {}
