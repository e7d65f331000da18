package inference_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// deps returns the packages pkg depends on (go list -deps) with the build tags.
func deps(t *testing.T, tags, pkg string) []string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command("go", "list", "-deps", "-tags="+tags, pkg).Output()
	require.NoError(t, err, "go list -deps -tags=%q %s", tags, pkg)
	return strings.Fields(string(out))
}

// TestDependenciesPointTheRightWay: the server imports neither its harness
// nor the optional back-ends (so a program that imports it inherits no GPU
// driver), and metrics is a leaf under backend (issue 19, item 1).
func TestDependenciesPointTheRightWay(t *testing.T) {
	const mod = "github.com/inferbench/inferbench/inference"
	const suite = "github.com/inferbench/inferbench/internal/suite"
	tests := []struct {
		pkg       string
		forbidden []string
	}{
		{mod, []string{mod + "/loadgen", mod + "/cuda", mod + "/nop", suite, "gorgonia.org/cu", "github.com/NVIDIA/go-nvml"}},
		{mod + "/metrics", []string{mod + "/backend"}},
	}
	for _, tags := range []string{"", "cuda"} {
		for _, tt := range tests {
			got := deps(t, tags, tt.pkg)
			for _, f := range tt.forbidden {
				assert.NotContains(t, got, f, "%s imports %s (tags %q)", tt.pkg, f, tags)
			}
		}
	}
}
