package protocol

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/inferbench/inferbench/inference/v2pb"
)

// frames splits msg into buffers as gRPC's transport hands them to a codec:
// one per HTTP/2 data frame of at most size bytes (the first, like a frame
// carrying the message's 5-byte header too, shorter).
func frames(msg []byte, size int) mem.BufferSlice {
	var out mem.BufferSlice
	for n := size - 5; len(msg) > 0; n = size {
		n = min(n, len(msg))
		out = append(out, mem.SliceBuffer(msg[:n]))
		msg = msg[n:]
	}
	return out
}

// segments are the bytes of frames(msg, size), the first skip of them left
// out.
func segments(msg []byte, size, skip int) [][]byte {
	var segs [][]byte
	for _, b := range frames(msg, size) {
		d := b.ReadOnlyData()
		n := min(skip, len(d))
		skip -= n
		if len(d) > n {
			segs = append(segs, d[n:])
		}
	}
	return segs
}

// TestCopySegmentsCopiesInParallelWhatOneCopyWould: copySegments fills a
// tensor from the middle of a message split into frames (16 KiB, odd
// sizes, one buffer) with the bytes one copy would, with any number of
// workers, and leaves the segments just past it.
func TestCopySegmentsCopiesInParallelWhatOneCopyWould(t *testing.T) {
	old := copyWorkers
	t.Cleanup(func() { copyWorkers = old })
	rng := rand.New(rand.NewPCG(1, 2))
	msg := make([]byte, parallelCopyBytes*3+12345)
	for i := range msg {
		msg[i] = byte(rng.Uint32())
	}
	for _, workers := range []int{1, 2, 3, 8} {
		for _, frame := range []int{16 << 10, 16<<10 + 7, 1000, len(msg)} {
			for _, n := range []int{parallelCopyBytes - 1, parallelCopyBytes, len(msg) - 100} {
				t.Run(fmt.Sprintf("workers=%d/frame=%d/n=%d", workers, frame, n), func(t *testing.T) {
					copyWorkers = workers
					dst := make([]byte, n)
					rest, ok := copySegments(dst, segments(msg, frame, 37))
					require.True(t, ok)
					require.Equal(t, msg[37:37+n], dst)
					require.Equal(t, msg[37+n:], slices.Concat(rest...))
					if 37+n < len(msg) {
						require.NotEmpty(t, rest[0], "no empty segment left in front")
					}
				})
			}
		}
	}
	copyWorkers = 8
	_, ok := copySegments(make([]byte, parallelCopyBytes+1), segments(msg[:parallelCopyBytes], 16<<10, 0))
	require.False(t, ok, "more bytes asked for than the message holds")
}

// BenchmarkCopySegments copies a batch-256 tensor (3x250x250 FP32) out of
// 16 KiB frames, as the gRPC codec does, with 1 goroutine and with
// copyWorkers.
func BenchmarkCopySegments(b *testing.B) {
	old := copyWorkers
	b.Cleanup(func() { copyWorkers = old })
	n := 256 * 3 * 250 * 250 * 4
	dst := make([]byte, n)
	var segs [][]byte // frames allocated one by one, as gRPC's pool hands them out
	for left := n; left > 0; left -= 16 << 10 {
		segs = append(segs, make([]byte, min(left, 16<<10)))
	}
	for _, workers := range []int{1, old} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			copyWorkers = workers
			b.SetBytes(int64(n))
			for b.Loop() {
				if _, ok := copySegments(dst, segs); !ok {
					b.Fatal("short")
				}
			}
		})
	}
}

// TestVarintsAsProtobuf: the ModelInferRequest decoder, given a whole
// message (grpc-go's codec) or a byte at a time (h2grpc), takes and refuses
// the varints protowire does, the ten-byte ones included (found by
// FuzzInferCodec when the codec had a varint reader of its own: a tenth byte
// above 1 was taken, its bits past the 64th dropped, where protobuf refuses
// the message).
func TestVarintsAsProtobuf(t *testing.T) {
	s := fuzzService(t)
	c := inferCodec{std: encoding.GetCodecV2("proto"), s: s}
	for _, b := range [][]byte{
		{0},
		{0x7f},
		{0x80, 0x01},
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, // math.MaxUint64
		{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, // 0, not minimal
		{0x8e, 0x90, 0xc6, 0xcf, 0x9a, 0xeb, 0xcc, 0x96, 0x9b, 0x23}, // the fuzzer's
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, // eleven bytes
		{0x80, 0x80}, // truncated
	} {
		// An unknown varint field, and a model name's length.
		for _, msg := range [][]byte{
			append(protowire.AppendTag(nil, 100, protowire.VarintType), b...),
			append(protowire.AppendTag(nil, 1, protowire.BytesType), b...),
		} {
			checkInferDecoder(t, s, msg, func(r *v2pb.ModelInferRequest) error {
				return c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(msg)}, r)
			})
			checkInferDecoder(t, s, msg, func(r *v2pb.ModelInferRequest) error {
				k := s.newInferSink(len(msg), false)
				for _, x := range msg {
					b := k.Buffer(1)
					b[0] = x
					if err := k.Filled(1); err != nil {
						k.Release()
						return err
					}
				}
				return k.Decode(r)
			})
		}
	}
	var r v2pb.ModelInferRequest
	msg := protowire.AppendVarint(protowire.AppendTag(nil, 100, protowire.VarintType), math.MaxUint64)
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(msg)}, &r))
	require.Equal(t, msg, []byte(r.ProtoReflect().GetUnknown()), "the unknown field, kept whole")
}
