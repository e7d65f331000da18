package cuda

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/inferbench/inferbench/inference/backend"
)

func TestUnion(t *testing.T) {
	tests := []struct {
		name  string
		spans [][2]float64
		limit float64
		want  float64
	}{
		{"none", nil, 10, 0},
		{"disjoint", [][2]float64{{1, 2}, {4, 7}}, 10, 4},
		{"overlapping, unsorted", [][2]float64{{4, 7}, {1, 5}}, 10, 6},
		{"nested", [][2]float64{{1, 9}, {2, 3}}, 10, 8},
		{"clipped at both ends", [][2]float64{{-2, 1}, {9, 12}}, 10, 2},
		{"entirely outside", [][2]float64{{-3, -1}, {11, 12}}, 10, 0},
		{"touching", [][2]float64{{0, 5}, {5, 10}}, 10, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.InDelta(t, tt.want, union(tt.spans, tt.limit), 1e-12, "union(%v, %g)", tt.spans, tt.limit)
		})
	}
}

func TestNVMLPercent(t *testing.T) {
	missing := errors.New("libnvidia-ml.so.1 not found")
	tests := []struct {
		name        string
		unavailable error
		mean        float64
		samples     int
		percent     float64
		measured    bool
	}{
		{"sampled", nil, 42.5, 20, 42.5, true},
		{"sampled an idle GPU", nil, 0, 20, 0, true},
		{"no sample in a short interval", nil, 0, 0, 0, false},
		{"NVML unavailable", missing, 0, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var u backend.Utilization
			nvmlPercent(&u, tt.unavailable, tt.mean, tt.samples, 100*time.Millisecond)
			assert.Equal(t, tt.measured, u.PercentErr == nil, "measured (PercentErr = %v)", u.PercentErr)
			wantKind := backend.NoUtilization
			if tt.measured {
				wantKind = backend.GPUUtilization
			}
			assert.Equal(t, wantKind, u.Kind, "Kind")
			assert.Equal(t, tt.percent, u.Percent, "Percent")
			if tt.measured {
				assert.Equal(t, tt.samples, u.Samples, "Samples")
			} else {
				assert.Zero(t, u.Samples, "Samples")
			}
			if tt.unavailable != nil {
				assert.ErrorIs(t, u.PercentErr, tt.unavailable)
			}
		})
	}
}
