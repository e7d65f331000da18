package cuda

import (
	"testing"

	"github.com/stretchr/testify/assert"
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
