package inference

import (
	"context"
	"time"

	"github.com/inferbench/inferbench/inference/loadgen"
)

// Target adapts the server to a load generator: every request sends in (which
// the caller must not change while the load runs).
func (s *Server) Target(in Tensor) loadgen.Target { return target{s: s, in: in} }

type target struct {
	s  *Server
	in Tensor
}

func (t target) Send(ctx context.Context, at time.Time) (func() error, error) {
	c, err := t.s.Submit(ctx, Request{Input: t.in, Sent: at})
	if err != nil {
		return nil, err
	}
	return c.Err, nil
}
