package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAttacks builds the server command and plays every attack on it at a
// tenth of issue 35's sizes and connection counts (the two small JSON and
// protobuf floods at full size): each must leave the server up, answering
// health within the bound, within its memory allowance, with its own
// check held. The in-flight budget is 256 MiB, so that claims it bounds
// stay under it at this scale, and a probe may take 2 s (a busy CI machine;
// a starved probe takes forever).
func TestAttacks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and attacks the server command: not in -short")
	}
	bin := filepath.Join(t.TempDir(), "inferbench")
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "../../cmd/inferbench").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	var stdout, stderr bytes.Buffer
	err = run([]string{"-bin", bin, "-scale", "0.1", "-inflight-bytes", strconv.Itoa(256 << 20), "-probe-bound", "2s"}, &stdout, &stderr)
	t.Logf("\n%s", stdout.String())
	assert.NoError(t, err, "stderr:\n%s", stderr.String())
	assert.Equal(t, len(attacks)+2, strings.Count(stdout.String(), "\n"), "a table row for every attack")
}

// TestFlags checks the command's flag errors.
func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "-bin is required"},
		{[]string{"-bin", "x", "-scale", "2"}, "-scale 2"},
		{[]string{"-bin", "x", "-only", "nope"}, `no attack "nope"`},
	} {
		var stdout, stderr bytes.Buffer
		err := run(tc.args, &stdout, &stderr)
		require.Error(t, err, "run(%q)", tc.args)
		assert.Contains(t, err.Error(), tc.want, "run(%q)", tc.args)
	}
}
