package protocol

import (
	"context"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/internal/fault"
)

// shmInput returns the input of n images of datatype that ref names, and the
// request's done function (see Model.run). From a system region, FP32 data
// is used in place: the tensor is a float32 view of the region, which the
// request holds until the server has answered; so is UINT8 data when the
// server normalises it on the device (Model.uint8Device), as a uint8 tensor.
// FP16 and other UINT8 data are widened into a buffer from the pool, and the
// region is let go at once. From a CUDA region, FP32 data (or UINT8 data the
// server normalises on the device) is the tensor's device memory, held
// likewise; other datatypes would need the host and are refused.
func (s *Service) shmInput(ctx context.Context, m *Model, name, datatype string, n int, ref *shmRef) (inference.Tensor, func(bool), error) {
	where := "input " + name
	want := int64(m.byteSize(n, datatype))
	shape := []int{n, m.channels, m.height, m.width}
	inPlace := datatype == FP32 && hostLittleEndian
	align := 1
	if inPlace {
		align = 4
	}
	v, reg, err := s.shm.acquire(where, ref, want, true, align)
	if err != nil {
		return inference.Tensor{}, nil, err
	}
	if reg.kind == cudaRegion {
		switch {
		case datatype == FP32:
			return inference.Tensor{Shape: shape, Device: v.dev}, s.shm.releaser(m.srv, reg), nil
		case m.bytesToServer(datatype):
			return inference.Tensor{Shape: shape, Datatype: inference.Uint8, Device: v.dev}, s.shm.releaser(m.srv, reg), nil
		}
		s.shm.release(reg)
		takes := FP32
		if m.uint8Device {
			takes += " or " + UINT8
		}
		return inference.Tensor{}, nil, badRequest("%s: %s data in CUDA shared-memory region %q: this server takes CUDA shared-memory input as %s only (it would convert %s on the host)",
			where, datatype, ref.region, takes, datatype)
	}
	if inPlace {
		return inference.Tensor{Shape: shape, Data: float32View(v.host)}, s.shm.releaser(m.srv, reg), nil
	}
	if m.bytesToServer(datatype) {
		return inference.Tensor{Shape: shape, Datatype: inference.Uint8, Bytes: v.host}, s.shm.releaser(m.srv, reg), nil
	}
	defer s.shm.release(reg)
	in, err := m.inputs.get(ctx, n, m.imageValues())
	if err != nil {
		return inference.Tensor{}, nil, err
	}
	// The region is the client's: a fault reading it (its object shrunk)
	// fails this request only.
	if err := fault.Guard(func() { widen(in.Data, v.host, datatype, m.lut, m.height*m.width) }); err != nil {
		m.inputs.put(in)
		return inference.Tensor{}, nil, badRequest("%s: reading shared-memory region %q: %v", where, ref.region, err)
	}
	return in, func(bool) { m.inputs.put(in) }, nil
}

// output returns where the logits of n images go, and the request's done
// function: a new slice; or, when ref names a system region, a float32 view
// of it that the server writes the logits into; or, when ref names a CUDA
// region, its device memory (the answer then carries no data).
func (s *Service) output(m *Model, n int, ref *shmRef) (host []float32, dev inference.DeviceMemory, done func(bool), err error) {
	if ref == nil {
		return make([]float32, n*m.classes), dev, func(bool) {}, nil
	}
	where := "output " + OutputName
	v, reg, err := s.shm.acquire(where, ref, int64(4*n*m.classes), false, 4)
	if err != nil {
		return nil, dev, nil, err
	}
	if reg.kind == cudaRegion {
		return nil, v.dev, s.shm.releaser(m.srv, reg), nil
	}
	if !hostLittleEndian {
		s.shm.release(reg)
		return nil, dev, nil, badRequest("%s: shared-memory outputs need a little-endian host", where)
	}
	return float32View(v.host), dev, s.shm.releaser(m.srv, reg), nil
}

// both is the done function of a request with two.
func both(a, b func(bool)) func(bool) {
	return func(closed bool) { a(closed); b(closed) }
}
