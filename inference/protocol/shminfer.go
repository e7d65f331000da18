package protocol

import (
	"context"

	"github.com/inferbench/inferbench/inference"
)

// shmInput returns the input of n images of datatype that ref names, and the
// request's done function (see Model.run). FP32 data is used in place: the
// tensor is a float32 view of the region, which the request holds until the
// server has answered; so is UINT8 data when the server normalises it on the
// device (Model.uint8Device), as a uint8 tensor. FP16 and other UINT8 data are
// widened into a buffer from the pool, and the region is let go at once.
func (s *Service) shmInput(ctx context.Context, m *Model, name, datatype string, n int, ref *shmRef) (inference.Tensor, func(bool), error) {
	where := "input " + name
	want := int64(m.byteSize(n, datatype))
	shape := []int{n, m.channels, m.height, m.width}
	if datatype == FP32 && hostLittleEndian {
		b, reg, err := s.shm.acquire(where, ref, want, true, 4)
		if err != nil {
			return inference.Tensor{}, nil, err
		}
		return inference.Tensor{Shape: shape, Data: float32View(b)}, s.shm.releaser(m.srv, reg), nil
	}
	b, reg, err := s.shm.acquire(where, ref, want, true, 1)
	if err != nil {
		return inference.Tensor{}, nil, err
	}
	if m.bytesToServer(datatype) {
		return inference.Tensor{Shape: shape, Datatype: inference.Uint8, Bytes: b}, s.shm.releaser(m.srv, reg), nil
	}
	defer s.shm.release(reg)
	in, err := m.inputs.get(ctx, n, m.imageValues())
	if err != nil {
		return inference.Tensor{}, nil, err
	}
	widen(in.Data, b, datatype, m.lut, m.height*m.width)
	return in, func(bool) { m.inputs.put(in) }, nil
}

// output returns where the logits of n images go, and the request's done
// function: a new slice, or, when ref names a region, a float32 view of it
// that the server writes the logits into (so the answer carries no data).
func (s *Service) output(m *Model, n int, ref *shmRef) ([]float32, func(bool), error) {
	if ref == nil {
		return make([]float32, n*m.classes), func(bool) {}, nil
	}
	where := "output " + OutputName
	if !hostLittleEndian {
		return nil, nil, badRequest("%s: shared-memory outputs need a little-endian host", where)
	}
	b, reg, err := s.shm.acquire(where, ref, int64(4*n*m.classes), false, 4)
	if err != nil {
		return nil, nil, err
	}
	return float32View(b), s.shm.releaser(m.srv, reg), nil
}

// both is the done function of a request with two.
func both(a, b func(bool)) func(bool) {
	return func(closed bool) { a(closed); b(closed) }
}
