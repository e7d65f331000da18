package fault

import "runtime/debug"

// restoreProbe reports the calling goroutine's SetPanicOnFault setting,
// leaving it as it was.
func restoreProbe() bool {
	old := debug.SetPanicOnFault(false)
	debug.SetPanicOnFault(old)
	return old
}
