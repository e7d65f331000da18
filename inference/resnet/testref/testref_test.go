package testref_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/resnet/testref"
)

const dir = "../../../testdata/reference"

// TestReferenceParity checks resnet's float64 forward pass against PyTorch's
// float64 logits: max |got-want| <= 1e-4 * max |want| (in practice ~1e-12).
func TestReferenceParity(t *testing.T) {
	cases, err := testref.Load(dir)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(cases), 5)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			got, err := c.Model.Reference(c.Input, c.N, c.H, c.W)
			require.NoError(t, err)
			require.Len(t, got, len(c.Logits))
			var maxErr, scale float64
			for i := range got {
				maxErr = max(maxErr, math.Abs(got[i]-c.Logits[i]))
				scale = max(scale, math.Abs(c.Logits[i]))
			}
			t.Logf("%s: arch %+v, %dx%dx%d: max abs error %.3g, max |logit| %.3g", c.Name, c.Model.Arch, c.N, c.H, c.W, maxErr, scale)
			assert.LessOrEqual(t, maxErr, 1e-4*scale, "Reference(%s) max abs error", c.Name)
			assert.Greater(t, scale, 0.1, "logits of %s are degenerate", c.Name)
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tmp := t.TempDir()
	write := func(name, body string) string {
		d := filepath.Join(tmp, name)
		require.NoError(t, os.MkdirAll(d, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, "manifest.json"), []byte(body), 0o644))
		return d
	}
	tests := []struct {
		name, dir, want string
	}{
		{"no directory", filepath.Join(tmp, "absent"), "no such file"},
		{"bad json", write("badjson", "{"), "unexpected end of JSON"},
		{"no cases", write("empty", `{"cases": []}`), "lists no cases"},
		{"missing checkpoint", write("nockpt", `{"cases": [{"name": "x", "checkpoint": "x.pt", "inputs": "x.io.safetensors"}]}`), "case x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := testref.Load(tt.dir)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.Contains(t, err.Error(), "testref: ")
		})
	}
}
