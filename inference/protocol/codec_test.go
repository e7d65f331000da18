package protocol

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
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

// TestReadIntoCopiesInParallelWhatOneCopyWould: readInto fills a tensor from
// the middle of a message split into frames (16 KiB, odd sizes, one buffer)
// with the bytes io.ReadFull would, with any number of workers, and leaves
// the reader just past it.
func TestReadIntoCopiesInParallelWhatOneCopyWould(t *testing.T) {
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
					rd := frames(msg, frame).Reader()
					_, err := rd.Discard(37)
					require.NoError(t, err)
					dst := make([]byte, n)
					require.NoError(t, readInto(rd, dst))
					require.Equal(t, msg[37:37+n], dst)
					require.Equal(t, len(msg)-37-n, rd.Remaining())
					b, err := rd.ReadByte()
					if 37+n < len(msg) {
						require.NoError(t, err)
						require.Equal(t, msg[37+n], b)
					}
				})
			}
		}
	}
	copyWorkers = 8
	rd := frames(msg[:parallelCopyBytes], 16<<10).Reader()
	require.Error(t, readInto(rd, make([]byte, parallelCopyBytes+1)), "more bytes asked for than the message holds")
}

// BenchmarkReadInto copies a batch-256 tensor (3x250x250 FP32) out of 16 KiB
// frames, as the gRPC codec does, with 1 goroutine and with copyWorkers.
func BenchmarkReadInto(b *testing.B) {
	old := copyWorkers
	b.Cleanup(func() { copyWorkers = old })
	n := 256 * 3 * 250 * 250 * 4
	dst := make([]byte, n)
	var data mem.BufferSlice // frames allocated one by one, as gRPC's pool hands them out
	for left := n; left > 0; left -= 16 << 10 {
		data = append(data, mem.SliceBuffer(make([]byte, min(left, 16<<10))))
	}
	for _, workers := range []int{1, old} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			copyWorkers = workers
			b.SetBytes(int64(n))
			for b.Loop() {
				if err := readInto(data.Reader(), dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestReadUvarintAsProtobuf: readUvarint takes and refuses the varints
// protowire does, the ten-byte ones included (found by FuzzInferCodec: a
// tenth byte above 1 was taken, its bits past the 64th dropped, where
// protobuf refuses the message).
func TestReadUvarintAsProtobuf(t *testing.T) {
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
		want, n := protowire.ConsumeVarint(b)
		got, err := readUvarint(mem.BufferSlice{mem.SliceBuffer(b)}.Reader())
		if n < 0 {
			require.Error(t, err, "% x", b)
			continue
		}
		require.NoError(t, err, "% x", b)
		require.Equal(t, want, got, "% x", b)
	}
	v, err := readUvarint(mem.BufferSlice{mem.SliceBuffer(protowire.AppendVarint(nil, math.MaxUint64))}.Reader())
	require.NoError(t, err)
	require.Equal(t, uint64(math.MaxUint64), v)
}
