package suite

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInputFlag(t *testing.T) {
	c, err := parseSuiteFlags(t, noGPU, "Server", "100x")
	require.NoError(t, err)
	assert.Nil(t, c.inputs, "no -input: float32, no input= in names")
	c, err = parseSuiteFlags(t, noGPU, "Server", "100x", "-input", "uint8,fp32")
	require.NoError(t, err)
	assert.Equal(t, []string{"uint8", "fp32"}, c.inputs)
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

func TestBatchingFlag(t *testing.T) {
	c, err := parseSuiteFlags(t, noGPU, "Server", "100x")
	require.NoError(t, err)
	assert.Nil(t, c.batching, "no -batching: off, no batching= in names")
	c, err = parseSuiteFlags(t, noGPU, "Server", "100x", "-batching", "off,on")
	require.NoError(t, err)
	assert.Equal(t, []string{"off", "on"}, c.batching)
	_, err = parseSuiteFlags(t, noGPU, "Server", "100x", "-batching", "auto")
	assert.ErrorContains(t, err, `-batching "auto": "auto" is not one of off, on`)
	_, err = parseSuiteFlags(t, noGPU, "Server", "100x", "-batching", "")
	assert.ErrorContains(t, err, `give at least one of off, on`)
}

// TestSuiteBinaryBatching runs a burst of batch-1 requests with -batching
// off,on in process and over gRPC: batching=off runs every request alone,
// batching=on merges them (the burst queues them all at once and the server
// waits up to 20 ms for company).
func TestSuiteBinaryBatching(t *testing.T) {
	stdout, stderr, code := suiteBinary(t, append([]string{"-test.bench", "Server$", "-test.benchtime", "24x",
		"-batching", "off,on", "-max-queue-delay", "20ms", "-transports", "inproc,grpc", "-serve-bin", testServeBin(t)}, tinySuite...)...)
	require.Zero(t, code, "stderr: %s", stderr)
	var names []string
	for _, r := range results(t, stdout) {
		names = append(names, nameOf(r))
		if strings.Contains(nameOf(r), "/batching=on/") {
			assert.Greater(t, value(t, r, "mean-batch"), 1.0, nameOf(r))
		} else {
			assert.Equal(t, 1.0, value(t, r, "mean-batch"), nameOf(r))
		}
	}
	var want []string
	for _, bat := range []string{"off", "on"} {
		for _, tr := range []string{"inproc", "grpc"} {
			want = append(want, "Server/backend=cpu/batch=1/workers=1/pipeline=serial/precision=fp32/graphs=off/devices=1/batching="+bat+"/load=burst/transport="+tr)
		}
	}
	assert.Equal(t, want, names)
}
