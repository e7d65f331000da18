package protocol

import (
	"context"
	"sync"
	"unsafe"

	"golang.org/x/sync/semaphore"

	"github.com/inferbench/inferbench/inference"
)

// inputPool hands out input tensors from the server's AllocInput (pinned
// host memory on CUDA, so decoded requests are copied to the GPU without a
// staging copy) and keeps released ones for reuse, by batch size.
//
// The bytes of tensors in use are bounded by a weighted semaphore: a request
// that would pass the bound waits for room until its context ends (the
// server's Block policy) or fails at once with 503 (Reject). Released
// tensors are kept while their bytes stay within the same bound; beyond it
// the oldest are freed.
type inputPool struct {
	srv    *inference.Server
	inUse  *semaphore.Weighted
	limit  int64
	reject bool

	mu        sync.Mutex
	idle      map[int][]inference.Tensor // by images
	order     []int                      // batch sizes of idle tensors, oldest first
	idleBytes int64
	// lent holds the tensors the gRPC codec filled, by the address of their
	// data, until the handler claims them.
	lent map[unsafe.Pointer]inference.Tensor
}

func newInputPool(srv *inference.Server, limit int64, reject bool) *inputPool {
	return &inputPool{srv: srv, inUse: semaphore.NewWeighted(limit), limit: limit, reject: reject,
		idle: map[int][]inference.Tensor{}, lent: map[unsafe.Pointer]inference.Tensor{}}
}

func tensorBytes(t inference.Tensor) int64 { return 4 * int64(len(t.Data)) }

// get returns a tensor of n images, waiting for room as the policy says.
func (p *inputPool) get(ctx context.Context, n, values int) (inference.Tensor, error) {
	size := 4 * int64(n) * int64(values)
	if p.reject {
		if !p.inUse.TryAcquire(size) {
			return inference.Tensor{}, overloaded("inference: the front door's input memory (%d bytes) is full", p.limit)
		}
	} else if err := p.inUse.Acquire(ctx, size); err != nil {
		return inference.Tensor{}, err
	}
	return p.take(n, size)
}

// lend returns a tensor of n images if the budget has room now, recorded as
// lent until claim takes it back by its data's address.
func (p *inputPool) lend(n, values int) (inference.Tensor, bool) {
	size := 4 * int64(n) * int64(values)
	if !p.inUse.TryAcquire(size) {
		return inference.Tensor{}, false
	}
	t, err := p.take(n, size)
	if err != nil {
		return inference.Tensor{}, false
	}
	p.mu.Lock()
	p.lent[unsafe.Pointer(unsafe.SliceData(t.Data))] = t
	p.mu.Unlock()
	return t, true
}

// claim returns the lent tensor whose data b is (or begins), and forgets the loan; the
// caller owns it (and puts it back) from then on.
func (p *inputPool) claim(b []byte) (inference.Tensor, bool) {
	if len(b) == 0 {
		return inference.Tensor{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.lent[lentKey(b)]
	if ok && len(b) <= 4*len(t.Data) {
		delete(p.lent, lentKey(b))
		return t, true
	}
	return inference.Tensor{}, false
}

// take returns an idle tensor of n images or a new one; size bytes of the
// budget are already acquired for it.
func (p *inputPool) take(n int, size int64) (inference.Tensor, error) {
	p.mu.Lock()
	if l := p.idle[n]; len(l) > 0 {
		t := l[len(l)-1]
		p.idle[n] = l[:len(l)-1]
		p.idleBytes -= size
		for i, b := range p.order {
			if b == n {
				p.order = append(p.order[:i], p.order[i+1:]...)
				break
			}
		}
		p.mu.Unlock()
		return t, nil
	}
	p.mu.Unlock()
	t, err := p.srv.AllocInput(n)
	if err != nil {
		p.inUse.Release(size)
		return inference.Tensor{}, err
	}
	return t, nil
}

// put returns t, which nobody reads or writes any more, to the pool.
func (p *inputPool) put(t inference.Tensor) {
	size := tensorBytes(t)
	if size == 0 {
		return
	}
	n := t.Shape[0]
	var evict []inference.Tensor
	p.mu.Lock()
	p.idle[n] = append(p.idle[n], t)
	p.order = append(p.order, n)
	p.idleBytes += size
	for p.idleBytes > p.limit && len(p.order) > 0 {
		b := p.order[0]
		p.order = p.order[1:]
		l := p.idle[b]
		old := l[0]
		p.idle[b] = l[1:]
		p.idleBytes -= tensorBytes(old)
		evict = append(evict, old)
	}
	p.mu.Unlock()
	p.inUse.Release(size)
	for _, old := range evict {
		p.srv.FreeInput(old)
	}
}

// close frees every idle tensor. Tensors still in use are freed with the
// server.
func (p *inputPool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.order, p.idleBytes = map[int][]inference.Tensor{}, nil, 0
	p.mu.Unlock()
	for _, l := range idle {
		for _, t := range l {
			p.srv.FreeInput(t)
		}
	}
}
