package cuda

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCopier(t *testing.T) {
	tests := []struct {
		name    string
		workers int
		sizes   []int // one copy per size, into consecutive ranges
	}{
		{"small inline", 4, []int{1, 100, minJob - 1}},
		{"one job each", 4, []int{minJob, 3 * minJob, 2*chunk - 1}},
		{"split", 4, []int{2 * chunk, 5*chunk + 7}},
		{"many images", 8, []int{187500, 187500, 187500, 187500, 187500}},
		{"one worker", 1, []int{3 * chunk}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCopier(tt.workers)
			defer c.close()
			total := 0
			for _, n := range tt.sizes {
				total += n
			}
			src, dst := make([]float32, total), make([]float32, total)
			for i := range src {
				src[i] = float32(i)
			}
			var wg copyGroup
			off := 0
			for _, n := range tt.sizes {
				c.copy(dst[off:off+n], src[off:off+n], &wg)
				off += n
			}
			wg.Wait()
			assert.Equal(t, src, dst)
		})
	}
}
