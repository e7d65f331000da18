// Package bufpool is a gRPC buffer pool (google.golang.org/grpc/mem's
// BufferPool) that hands buffers out again without zeroing them.
//
// gRPC's default pool clears every buffer it reuses. The transport reads each
// 16 KiB HTTP/2 data frame into a buffer from the pool, so a 750 KB batch-1
// request cost 47 clears of 16 KiB and a 192 MB batch-256 one about 12,000,
// on the goroutine that reads the connection: 14 % of the server's CPU time
// in a profile of BenchmarkTransport (nop, batch 32). gRPC fills a buffer's
// first n bytes before it reads them (a frame's payload, a marshalled
// message), so the clearing protects nothing it reads; this pool skips it.
//
// Buffers come in power-of-two capacities from 256 B to MaxPooled, one
// sync.Pool each; larger requests are allocated and left to the collector.
package bufpool

import (
	"math/bits"
	"sync"
)

const (
	minShift = 8  // 256 B
	maxShift = 22 // 4 MiB
	// MaxPooled is the largest capacity the pool keeps.
	MaxPooled = 1 << maxShift
)

// Pool is a mem.BufferPool whose buffers are not cleared between uses. The
// zero value is ready; it is safe for concurrent use.
type Pool struct {
	tiers [maxShift - minShift + 1]sync.Pool
}

// shift is the capacity class of n bytes: the smallest s with 1<<s >= n, at
// least minShift.
func shift(n int) int {
	if n <= 1<<minShift {
		return minShift
	}
	return bits.Len(uint(n - 1))
}

// Get returns a buffer of length n; its contents are whatever the last user
// left there.
func (p *Pool) Get(n int) *[]byte {
	s := shift(n)
	if s > maxShift {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.tiers[s-minShift].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<s)
	return &b
}

// Put gives b back for reuse. Buffers of a capacity the pool does not make
// (larger than MaxPooled, or not a power of two) are dropped.
func (p *Pool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minShift || c > MaxPooled || c&(c-1) != 0 {
		return
	}
	p.tiers[bits.Len(uint(c))-1-minShift].Put(b)
}
