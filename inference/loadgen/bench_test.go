package loadgen

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// instant is a Target that answers at once: what is left is the generator's
// own cost per request.
type instant struct{}

func (instant) Send(context.Context, time.Time) (func() error, error) {
	return func() error { return nil }, nil
}

// BenchmarkGenerator measures the generator's cost per request (ns/op) in each
// mode against a target that costs nothing.
func BenchmarkGenerator(b *testing.B) {
	specs := []Spec{
		{Mode: Burst},
		{Mode: Closed, Concurrency: 1},
		{Mode: Closed, Concurrency: 64},
		{Mode: Open, Rate: 1e9}, // always behind schedule: never sleeps
	}
	for _, s := range specs {
		name := "mode=" + s.Mode.String()
		if s.Mode == Closed {
			name += "/c=" + strconv.Itoa(s.Concurrency)
		}
		b.Run(name, func(b *testing.B) {
			g, err := Start(context.Background(), instant{}, s)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := g.Next(); err != nil {
					b.Fatal(err)
				}
			}
			r := g.Finish()
			if r.Completed != r.Sent {
				b.Fatalf("completed %d of %d", r.Completed, r.Sent)
			}
		})
	}
}
