package inference

import (
	"errors"
	"fmt"

	"github.com/inferbench/inferbench/inference/backend"
)

// RegisterHost prepares p, memory the caller owns and keeps mapped (a client's
// shared-memory region, say), for the back-end to copy inputs from directly:
// on the CUDA back-end it is page-locked once (cuMemHostRegister), so the
// copy-in of any request whose Input.Data lies inside p is a DMA straight
// from p; the CPU and nop back-ends read inputs in place and do nothing. Call
// unregister, once, before p is unmapped and only when no request whose input
// lies inside p is unanswered. It is safe for concurrent use.
func (s *Server) RegisterHost(p []byte) (unregister func() error, err error) {
	if len(p) == 0 {
		return nil, errors.New("inference: RegisterHost of no memory")
	}
	r, ok := s.eng.(backend.HostRegistrar)
	if !ok {
		return func() error { return nil }, nil
	}
	u, err := r.RegisterHost(p)
	if err != nil {
		return nil, fmt.Errorf("inference: registering %d bytes of host memory with the back-end: %w", len(p), err)
	}
	return u, nil
}
