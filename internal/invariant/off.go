//go:build !invariants

package invariant

// Enabled reports whether the invariant checks are compiled in (build tag
// invariants).
const Enabled = false
