package conv

import (
	"fmt"
	"testing"

	"github.com/inferbench/inferbench/inference/internal/cpu/gemm"
)

// BenchmarkInput measures Runner.Input, the stem's input conversion (NCHW
// images to the padded NHWC layout), for 8 images of 3x250x250 with the
// stem's padding of 3, on 1 and 2 threads (and GOMAXPROCS's, when more).
func BenchmarkInput(b *testing.B) {
	const n, h, w = 8, 250, 250
	l := Layout{H: h, W: w, C: 3, Pitch: 3, Pad: 3}
	imgs := make([][]float32, n)
	for i := range imgs {
		imgs[i] = make([]float32, 3*h*w)
		for j := range imgs[i] {
			imgs[i][j] = float32(j % 251)
		}
	}
	out := make([]float32, l.Size(n))
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			ctx, err := gemm.New(gemm.Config{Threads: threads})
			if err != nil {
				b.Fatal(err)
			}
			defer ctx.Close()
			r := NewRunner(ctx)
			b.SetBytes(int64(4 * 3 * h * w * n))
			for b.Loop() {
				if err := r.Input(l, imgs, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
