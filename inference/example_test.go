package inference_test

import (
	"context"
	"fmt"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/resnet"
)

// A server on the CPU back-end with two workers on the overlap pipeline,
// serving a small seeded ResNet (the zero Config serves ResNet-18 at 250x250).
func Example() {
	m, err := resnet.New(resnet.Arch{InChannels: 3, Stem: 8, Widths: []int{8, 16}, Blocks: []int{1, 1}, Classes: 10}, 1)
	if err != nil {
		panic(err)
	}
	s, err := inference.New(inference.Config{Options: inference.Options{Height: 64, Width: 64, MaxBatch: 8, Workers: 2, Pipeline: inference.Overlap}, Model: m})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	resp, err := s.Infer(context.Background(), inference.NewInput(4, 64, 64))
	if err != nil {
		panic(err)
	}
	fmt.Println("logits shape:", resp.Logits.Shape)

	_, err = s.Infer(context.Background(), inference.NewInput(4, 32, 64))
	fmt.Println(err)

	st := s.Stats()
	fmt.Println("completed:", st.Completed, "rejected:", st.Rejected)
	if err := s.Shutdown(context.Background()); err != nil {
		panic(err)
	}
	// Output:
	// logits shape: [4 10]
	// inference: bad input: height: want 64, got 32
	// completed: 1 rejected: 1
}
