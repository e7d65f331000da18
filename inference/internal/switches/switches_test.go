package switches

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSet(t *testing.T) {
	for _, s := range All {
		if v, ok := os.LookupEnv(s.Name); ok {
			t.Setenv(s.Name, v) // restored at the end
			require.NoError(t, os.Unsetenv(s.Name))
		}
	}
	assert.Empty(t, Set(), "Set() with no switch set")
	t.Setenv(CUDNNSearch.Name, "exhaustive")
	t.Setenv(GemmKernel.Name, "generic")
	t.Setenv(CUDNNCache.Name, "/tmp/a.json") // a file: reported by its back-end
	assert.Equal(t, []string{"INFERBENCH_GEMM_KERNEL=generic", "INFERBENCH_CUDNN_SEARCH=exhaustive"}, Set())
}

// TestOnlyHereReadsTheEnvironment: outside tests and the gateplant build,
// no package of the inference tree but this one reads an environment
// variable.
func TestOnlyHereReadsTheEnvironment(t *testing.T) {
	for _, s := range All {
		assert.True(t, strings.HasPrefix(s.Name, "INFERBENCH_"), "%s", s.Name)
		assert.NotEmpty(t, s.Doc, "%s has no Doc", s.Name)
	}
	root := filepath.Join("..", "..") // the inference tree
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		if filepath.Base(filepath.Dir(path)) == "switches" {
			return nil
		}
		n++
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "//go:build gateplant") {
			return nil // the regression gate's planted slowdowns: never in a default build
		}
		for _, call := range []string{"os.Getenv(", "os.LookupEnv(", "os.Environ("} {
			assert.False(t, strings.Contains(string(b), call), "%s calls %s: name the variable in package switches", path, call)
		}
		return nil
	})
	require.NoError(t, err)
	assert.Greater(t, n, 100, "Go files looked at under %s", root)
}
