package inference_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/internal/switches"
)

// TestInfoEchoesSwitches: a switch set in the environment is a config line
// of every server, whatever its back-end; none set, no line.
func TestInfoEchoesSwitches(t *testing.T) {
	line := func() (string, bool) {
		s, err := inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 1}, BackendName: "nop", Model: tinyModel(t)})
		require.NoError(t, err)
		defer s.Close()
		for _, kv := range s.Info().Config {
			if kv.Key == "switches" {
				return kv.Value, true
			}
		}
		return "", false
	}
	for _, sw := range switches.All {
		t.Setenv(sw.Name, "")
		require.NoError(t, os.Unsetenv(sw.Name))
	}
	_, ok := line()
	assert.False(t, ok, "a switches line with no switch set")
	t.Setenv(switches.GemmKernel.Name, "generic")
	got, ok := line()
	assert.True(t, ok, "no switches line with %s set", switches.GemmKernel.Name)
	assert.Equal(t, "INFERBENCH_GEMM_KERNEL=generic", got)
}
