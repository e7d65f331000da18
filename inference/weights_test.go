package inference_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/resnet"
)

// TestWeightsSayWhatIsServed: Weights and Arch name the model a server runs.
func TestWeightsSayWhatIsServed(t *testing.T) {
	opts := inference.Options{Height: 32, Width: 32, MaxBatch: 1}
	for _, tc := range []struct {
		name          string
		cfg           inference.Config
		weights, arch string
	}{
		{"seeded", inference.Config{Arch: resnet.Tiny(), Seed: 4},
			"seeded random (torchvision initialisation, seed 4): logits are no classification", "tiny"},
		{"default seed", inference.Config{Arch: resnet.Tiny()},
			"seeded random (torchvision initialisation, seed 1): logits are no classification", "tiny"},
		{"checkpoint", inference.Config{Checkpoint: filepath.Join("..", "testdata", "reference", "s2_zip.pt")},
			"checkpoint s2_zip.pt", "resnet(stem=8,widths=8-16,blocks=1-2,classes=5)"},
		{"given", inference.Config{Model: tinyModel(t)}, "given by the program (inference.Config.Model)", "tiny"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Options, cfg.BackendName = opts, "nop"
			s, err := inference.New(cfg)
			require.NoError(t, err)
			defer s.Close()
			assert.Equal(t, tc.weights, s.Weights())
			assert.Equal(t, tc.arch, s.Arch().Name())
		})
	}
}
