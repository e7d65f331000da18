//go:build !cuda

package suite

// suiteTags are the build tags of this test binary, which the inferbench
// command it builds for the wire transports gets too.
const suiteTags = ""
