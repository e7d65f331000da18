//go:build !gateplant

package inference

// gatePlant is false outside the gateplant build: Submit's planted delay is
// dead code that the compiler removes, so a default build cannot change speed.
const gatePlant = false

func plantSubmit() {}
