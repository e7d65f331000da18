//go:build !cuda

package suite

// suiteTags are the build tags of this binary (a test binary or inferbench),
// which the inferbench command it builds for the wire transports gets too.
const suiteTags = ""
