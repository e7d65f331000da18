package cuda

import "encoding/binary"

// kernelParams packs a kernel launch's parameters as our kernels declare
// them: the pointers first, 8 bytes each, then the ints as 32-bit values,
// little-endian, with no padding between (every kernel of kernels/ lists its
// pointers before its ints).
func kernelParams(ptrs []uintptr, ints ...int) []byte {
	b := make([]byte, 0, 8*len(ptrs)+4*len(ints))
	for _, p := range ptrs {
		b = binary.LittleEndian.AppendUint64(b, uint64(p))
	}
	for _, v := range ints {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return b
}
