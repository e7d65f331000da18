//go:build !race

package h2grpc

// raceEnabled: see writeFrames.
const raceEnabled = false
