package suite

import (
	"math/rand/v2"
	"unsafe"
)

// randomBytes fills b with the suite's uint8 input (-input uint8): bytes
// 0..255 from seed, the same in process and over the wire.
func randomBytes(b []byte, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 98))
	for i := range b {
		b[i] = byte(rng.IntN(256))
	}
	return b
}

// floatBytes is the memory of v as bytes.
func floatBytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
}
