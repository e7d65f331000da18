package loadgen_test

import (
	"context"
	"fmt"
	"time"

	"github.com/inferbench/inferbench/inference/loadgen"
)

// echo answers every request at once.
type echo struct{}

func (echo) Send(ctx context.Context, at time.Time) (func() error, error) {
	return func() error { return nil }, nil
}

func ExampleRun() {
	spec := loadgen.Spec{Mode: loadgen.Closed, Concurrency: 4, Warmup: true}
	r, err := loadgen.Run(context.Background(), echo{}, spec, 100)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("sent", r.Sent, "completed", r.Completed, "failed", r.Failed)
	fmt.Println("latencies recorded", r.Latency.Count())
	// Output:
	// sent 100 completed 100 failed 0
	// latencies recorded 100
}
