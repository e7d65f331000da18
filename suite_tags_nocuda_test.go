//go:build !cuda

package inferbench_test

// suiteTags are the build tags of this test binary, which the inferbench
// command it builds for the wire transports gets too.
const suiteTags = ""
