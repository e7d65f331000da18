package cuda

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoDriverAtStartUp guards the lazy driver: with -tags cuda, nothing the
// back-end imports may link libcuda or initialise a driver in a package init,
// as gorgonia.org/cu does (it exits the process without a driver).
func TestNoDriverAtStartUp(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command("go", "list", "-deps", "-tags=cuda", "github.com/inferbench/inferbench/inference/cuda").Output()
	require.NoError(t, err)
	assert.NotContains(t, strings.Fields(string(out)), "gorgonia.org/cu")

	out, err = exec.Command("go", "list", "-tags=cuda", "-f", "{{.CgoLDFLAGS}}",
		"github.com/inferbench/inferbench/inference/internal/...").Output()
	require.NoError(t, err)
	assert.NotContains(t, string(out), "-lcuda", "a package links libcuda")
}
