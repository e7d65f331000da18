package inferbench_test

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomBytes fills b with the suite's uint8 input (-input uint8): bytes
// 0..255 from seed, the same in process and over the wire.
func randomBytes(b []byte, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 98))
	for i := range b {
		b[i] = byte(rng.IntN(256))
	}
	return b
}

// floatBytes is the memory of v as bytes.
func floatBytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
}

func TestInputFlag(t *testing.T) {
	c, err := parseSuiteFlags(t, noGPU, "Server", "100x")
	require.NoError(t, err)
	assert.Equal(t, []string{""}, c.inputsOrNone(), "no -input: float32, no input= in names")
	c, err = parseSuiteFlags(t, noGPU, "Server", "100x", "-input", "uint8,fp32")
	require.NoError(t, err)
	assert.Equal(t, []string{"uint8", "fp32"}, c.inputsOrNone())
	_, err = parseSuiteFlags(t, noGPU, "Server", "100x", "-input", "int8")
	assert.ErrorContains(t, err, `-input "int8": "int8" is not one of fp32, uint8`)
}

// TestSuiteBinaryInputDatatypes runs the suite with -input fp32,uint8 in
// process and over the wire: every configuration runs once per datatype,
// named by it, and answers every request.
func TestSuiteBinaryInputDatatypes(t *testing.T) {
	stdout, stderr, code := suiteBinary(t, append([]string{"-test.bench", "Server$", "-test.benchtime", "10x",
		"-input", "fp32,uint8", "-transports", "inproc,grpc,http-shm", "-serve-bin", testServeBin(t)}, tinySuite...)...)
	require.Zero(t, code, "stderr: %s", stderr)
	var names []string
	for _, r := range results(t, stdout) {
		names = append(names, nameOf(r))
		assert.Positive(t, value(t, r, "samples/s"), nameOf(r))
	}
	var want []string
	for _, in := range []string{"fp32", "uint8"} {
		for _, tr := range []string{"inproc", "grpc", "http-shm"} {
			want = append(want, "Server/backend=cpu/batch=1/workers=1/pipeline=serial/precision=fp32/graphs=off/devices=1/input="+in+"/load=burst/transport="+tr)
		}
	}
	assert.Equal(t, want, names)
}
