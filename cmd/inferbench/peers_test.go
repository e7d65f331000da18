package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// needTritonclient skips unless python3 can import PyPI's tritonclient, or
// fails when INFERBENCH_PEERS_REQUIRE=1 (CI installs it and sets that).
func needTritonclient(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err == nil {
		var out []byte
		out, err = exec.Command(py, "-c", "import tritonclient.http, tritonclient.grpc, tritonclient.utils.shared_memory").CombinedOutput()
		if err != nil {
			err = fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
		}
	}
	if err != nil {
		if os.Getenv("INFERBENCH_PEERS_REQUIRE") == "1" {
			t.Fatalf("tritonclient is required (INFERBENCH_PEERS_REQUIRE=1): %v", err)
		}
		t.Skipf("Triton's Python client is not installed (%v): python3 -m pip install --user -r scripts/peers/requirements.txt", err)
	}
	return py
}

func writeFloats(t *testing.T, path string, v []float32) {
	b := make([]byte, 0, 4*len(v))
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

// TestTritonPythonClient runs scripts/peers/tritonclient_check.py against
// the real command on the CPU back-end: Triton's own client infers over HTTP
// and gRPC and through system shared memory made by its own helpers (behind
// a required header, which it sends as Triton's clients do), and every
// answer must equal the in-process logits bit for bit.
func TestTritonPythonClient(t *testing.T) {
	py := needTritonclient(t)
	const side, n, classes = 32, 2, 5
	// Reads that look before they sleep (-idle-poll) serve the same.
	s := startServer(t, "-model", "tiny", "-size", fmt.Sprintf("%dx%d", side, side), "-max-batch", "4", "-seed", "9", "-idle-poll", "200us",
		"-shm", "-shm-header", "inferbench-shm-key=s3cret")

	images, logits := inProcess(t, 9, 21, n, side)
	require.Len(t, logits, n*classes)

	dir := t.TempDir()
	in, want := filepath.Join(dir, "in.f32"), filepath.Join(dir, "want.f32")
	writeFloats(t, in, images)
	writeFloats(t, want, logits)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join("..", "..", "scripts", "peers", "tritonclient_check.py"),
		"--http", s.http, "--grpc", s.grpc, "--input", in, "--shape", fmt.Sprintf("%d,3,%d,%d", n, side, side),
		"--want", want, "--classes", fmt.Sprint(classes), "--shm-header", "inferbench-shm-key=s3cret", "--model", "tiny")
	out, err := cmd.CombinedOutput()
	t.Logf("tritonclient_check.py:\n%s", out)
	require.NoError(t, err, "server log:\n%s", s.logText())
	err, _ = s.stop(t)
	require.NoError(t, err, "exit after SIGTERM\n%s", s.logText())
}
