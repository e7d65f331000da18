package cuda

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPadSizes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		max      int
		prepared []int
		want     []int // index 1..max
	}{
		{"powers of two", 8, []int{1, 2, 4, 8}, []int{1, 2, 4, 4, 8, 8, 8, 8}},
		{"never more than double", 8, []int{1, 8}, []int{1, 2, 3, 8, 8, 8, 8, 8}},
		{"nothing prepared", 3, nil, []int{1, 2, 3}},
		{"exact sizes kept", 5, []int{3, 5}, []int{1, 3, 3, 5, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := padSizes(tc.max, func(m int) bool { return slices.Contains(tc.prepared, m) })
			assert.Equal(t, tc.want, got[1:], "padSizes(%d, %v)", tc.max, tc.prepared)
		})
	}
}
