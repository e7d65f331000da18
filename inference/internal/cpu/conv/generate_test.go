package conv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGenerated checks that the committed kernels are what gen_kernels.go
// writes today.
func TestGenerated(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the generator")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to run the generator")
	}
	dir := t.TempDir()
	out, err := exec.Command(goBin, "run", "gen_kernels.go", "-dir", dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, name := range []string{"kernels_amd64.go", "kernels_amd64.s"} {
		want, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		got, err := os.ReadFile(name)
		require.NoError(t, err)
		assert.True(t, string(want) == string(got), "%s is out of date: run go generate", name)
	}
}
