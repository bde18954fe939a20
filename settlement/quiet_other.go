//go:build !linux

package settlement

// Quietly runs f. On Linux it runs it at the lowest CPU priority; other
// systems have no per-thread priority that this build sets.
func Quietly(f func()) { f() }
