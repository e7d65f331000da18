package checkpoint

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"hash/crc32"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// segment is part of a deflated entry: lit bytes, or n copies of the byte run.
type segment struct {
	lit []byte
	run byte
	n   int
}

func lit(s string) segment         { return segment{lit: []byte(s)} }
func run(b byte, n int) segment    { return segment{run: b, n: n} }
func litBytes(b ...[]byte) segment { return segment{lit: bytes.Join(b, nil)} }
func le64(n uint64) []byte         { return binary.LittleEndian.AppendUint64(nil, n) }

// deflatedEntry is a zip entry's deflated bytes with its CRC-32 and size.
type deflatedEntry struct {
	data []byte
	crc  uint32
	size uint64
}

// deflateRuns deflates segments without holding their inflated bytes: a run of
// a MiB or more is compressed a MiB at a time until the compressor's output for
// a MiB repeats, then that output is repeated. Each chunk ends with a flush, so
// it is byte-aligned, and its back-references reach only into the 32 KiB before
// it, which hold the same byte in every copy. A GiB deflates in a fraction of a
// second this way.
func deflateRuns(t testing.TB, segs ...segment) deflatedEntry {
	t.Helper()
	var out, chunk bytes.Buffer
	w, err := flate.NewWriter(&chunk, flate.BestCompression)
	require.NoError(t, err)
	crc := crc32.NewIEEE()
	var size uint64
	emit := func(b []byte) []byte {
		_, err := w.Write(b)
		require.NoError(t, err)
		require.NoError(t, w.Flush())
		crc.Write(b)
		size += uint64(len(b))
		c := bytes.Clone(chunk.Bytes())
		out.Write(c)
		chunk.Reset()
		return c
	}
	const mib = 1 << 20
	block := make([]byte, mib)
	for _, s := range segs {
		if s.lit != nil {
			emit(s.lit)
			continue
		}
		for i := range block {
			block[i] = s.run
		}
		n := s.n
		if n >= 2*mib {
			emit(block)
			steady := emit(block)
			n -= 2 * mib
			for ; n >= mib; n -= mib {
				out.Write(steady)
				crc.Write(block)
				size += mib
			}
		}
		for n > 0 {
			k := min(n, mib)
			emit(block[:k])
			n -= k
		}
	}
	require.NoError(t, w.Close())
	out.Write(chunk.Bytes())
	return deflatedEntry{data: out.Bytes(), crc: crc.Sum32(), size: size}
}

// zipEntry is one entry of a hand-made zip: stored, or raw deflated bytes whose
// header declares their inflated size (or, if declare is set, lies).
type zipEntry struct {
	name     string
	stored   []byte
	deflated *deflatedEntry
	declare  uint64
}

func makeZip(t testing.TB, entries ...zipEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		if e.deflated != nil {
			size := e.deflated.size
			if e.declare != 0 {
				size = e.declare
			}
			w, err := zw.CreateRaw(&zip.FileHeader{
				Name: e.name, Method: zip.Deflate, CRC32: e.deflated.crc,
				CompressedSize64: uint64(len(e.deflated.data)), UncompressedSize64: size,
			})
			require.NoError(t, err)
			_, err = w.Write(e.deflated.data)
			require.NoError(t, err)
			continue
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: e.name, Method: zip.Store})
		require.NoError(t, err)
		_, err = w.Write(e.stored)
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// deflatedPickle is a zip whose data.pkl is segs, deflated.
func deflatedPickle(t testing.TB, segs ...segment) []byte {
	d := deflateRuns(t, segs...)
	return makeZip(t, zipEntry{name: "archive/data.pkl", deflated: &d})
}

// lyingPickle is deflatedPickle with a header that declares 1 MiB, under the
// limit for the file.
func lyingPickle(t testing.TB, segs ...segment) []byte {
	d := deflateRuns(t, segs...)
	return makeZip(t, zipEntry{name: "archive/data.pkl", deflated: &d, declare: 1 << 20})
}

// pickleBuilder writes protocol 2 opcodes for hand-made pickles.
type pickleBuilder struct{ bytes.Buffer }

func (p *pickleBuilder) op(s string) *pickleBuilder { p.WriteString(s); return p }
func (p *pickleBuilder) str(s string) *pickleBuilder {
	p.WriteByte('X')
	binary.Write(p, binary.LittleEndian, uint32(len(s)))
	p.WriteString(s)
	return p
}
func (p *pickleBuilder) int(n int) *pickleBuilder {
	p.WriteByte('J')
	binary.Write(p, binary.LittleEndian, int32(n))
	return p
}
func (p *pickleBuilder) put(i int) *pickleBuilder {
	p.WriteByte('r')
	binary.Write(p, binary.LittleEndian, uint32(i))
	return p
}
func (p *pickleBuilder) get(i int) *pickleBuilder {
	p.WriteByte('j')
	binary.Write(p, binary.LittleEndian, uint32(i))
	return p
}

// tensorPickle starts a state dict (memo 0) and a float tensor on storage "0" of
// numel elements with the given shape and stride (memo 1), leaving the dict on
// the stack.
func tensorPickle(numel int, shape, stride []int) *pickleBuilder {
	return typedTensorPickle("FloatStorage", "0", numel, shape, stride)
}

// typedTensorPickle is tensorPickle for a storage type and key.
func typedTensorPickle(storageType, key string, numel int, shape, stride []int) *pickleBuilder {
	p := &pickleBuilder{}
	p.op("\x80\x02ccollections\nOrderedDict\n)R").put(0)
	p.op("ctorch._utils\n_rebuild_tensor_v2\n((").str("storage").op("ctorch\n" + storageType + "\n").str(key).str("cpu").int(numel).op("tQ").int(0)
	p.op("(")
	for _, d := range shape {
		p.int(d)
	}
	p.op("t(")
	for _, d := range stride {
		p.int(d)
	}
	p.op("t\x89)tR").put(1).op("0")
	return p
}

// sharedDicts is a state dict whose tensor is reached through levels of dicts
// that each hold the level below under width keys of keyLen bytes: width^levels
// names from a pickle of a few KB.
func sharedDicts(t testing.TB, width, levels, keyLen int) []byte {
	p := tensorPickle(1, []int{1}, []int{1})
	p.op("}").str(strings.Repeat("w", keyLen)).get(1).op("s").put(2).op("0")
	for l := range levels {
		p.op("}(")
		for k := range width {
			p.str(strings.Repeat(string(rune('a'+k)), keyLen-1) + strconv.Itoa(l)).get(2 + l)
		}
		p.op("u").put(3 + l).op("0")
	}
	p.op("(").str("sd").get(2 + levels).op("u.")
	return torchZip(t, p.Bytes(), "little", map[string][]byte{"0": make([]byte, 4)})
}

// manyNames is a state dict naming one tensor of dims dimensions n times.
func manyNames(t testing.TB, n, dims int) []byte {
	shape := make([]int, dims)
	for i := range shape {
		shape[i] = 1
	}
	p := tensorPickle(1, shape, shape)
	for i := 0; i < n; i += 1000 {
		p.op("(")
		for j := i; j < min(n, i+1000); j++ {
			p.int(j).get(1)
		}
		p.op("u")
	}
	p.op(".")
	return torchZip(t, p.Bytes(), "little", map[string][]byte{"0": make([]byte, 4)})
}

// deflatedStorages is a state dict of count float16 tensors of n elements, each
// on its own storage of deflated zeros (the last with a wrong CRC-32 if badCRC),
// in a file padded by pad bytes.
func deflatedStorages(t testing.TB, count, n, pad int, badCRC bool) []byte {
	var ts []fakeTensor
	for i := range count {
		ts = append(ts, fakeTensor{key: "w" + strconv.Itoa(i), storage: strconv.Itoa(i), storageType: "HalfStorage", numel: n, shape: []int{n}, stride: []int{1}})
	}
	entries := []zipEntry{{name: "archive/data.pkl", stored: torchPickle(ts)}}
	d := deflateRuns(t, run(0, 2*n))
	for i := range count {
		e := d
		if badCRC && i == count-1 {
			e.crc ^= 1
		}
		entries = append(entries, zipEntry{name: "archive/data/" + strconv.Itoa(i), deflated: &e})
	}
	entries = append(entries, zipEntry{name: "archive/padding", stored: bytes.Repeat([]byte{0x5a}, pad)})
	return makeZip(t, entries...)
}

// hostileFiles are files that ask for far more memory than their size; each
// must be rejected within a small multiple of its size.
func hostileFiles(t testing.TB) []struct {
	name string
	data func() []byte
} {
	const mib = 1 << 20
	return []struct {
		name string
		data func() []byte
	}{
		{"zip, data.pkl of 64 MiB of NONE", func() []byte {
			return deflatedPickle(t, lit("\x80\x02"), run('N', 64*mib), lit("."))
		}},
		{"zip, data.pkl of 1 GiB of NONE", func() []byte {
			return deflatedPickle(t, lit("\x80\x02"), run('N', 1<<30), lit("."))
		}},
		{"zip, BINBYTES8 of 1 GiB", func() []byte {
			return deflatedPickle(t, litBytes([]byte("\x80\x04\x8e"), le64(1<<30)), run(0, 1<<30), lit("."))
		}},
		{"zip, list nested 30 million deep", func() []byte {
			return deflatedPickle(t, lit("\x80\x02"), run(']', 30_000_000), run('a', 30_000_000-1), lit("."))
		}},
		{"zip, data.pkl of 64 MiB of NONE, declared as 1 MiB", func() []byte {
			return lyingPickle(t, lit("\x80\x02"), run('N', 64*mib), lit("."))
		}},
		{"zip, BINBYTES8 of 1 GiB, declared as 1 MiB", func() []byte {
			return lyingPickle(t, litBytes([]byte("\x80\x04\x8e"), le64(1<<30)), run(0, 1<<30), lit("."))
		}},
		{"zip, list nested 30 million deep, declared as 1 MiB", func() []byte {
			return lyingPickle(t, lit("\x80\x02"), run(']', 30_000_000), run('a', 30_000_000-1), lit("."))
		}},
		{"zip, 100,000 names for one tensor of 64 dimensions", func() []byte { return manyNames(t, 100_000, 64) }},
		{"zip, 65,536 paths through shared dicts", func() []byte { return sharedDicts(t, 4, 8, 60) }},
		{"zip, 20 deflated float16 storages of 0.9 MiB, one with a bad CRC-32, in a 1 MiB file", func() []byte {
			return deflatedStorages(t, 20, 450_000, mib, true)
		}},
		{"legacy, a million EMPTY_LIST", func() []byte {
			return legacyFile([]byte("\x80\x02"+strings.Repeat("]", mib)+"."), nil, nil)
		}},
		{"legacy, a million DUP", func() []byte {
			return legacyFile([]byte("\x80\x02N"+strings.Repeat("2", mib)+"."), nil, nil)
		}},
		{"legacy, a million MEMOIZE", func() []byte {
			return legacyFile([]byte("\x80\x04N"+strings.Repeat("\x94", mib)+"."), nil, nil)
		}},
		{"legacy, 100,000 empty dicts", func() []byte {
			return legacyFile([]byte("\x80\x02"+strings.Repeat("}", 100_000)+"."), nil, nil)
		}},
	}
}

// allowedBytes is the most that reading a rejected file of size bytes may
// allocate in all: the pickle's value budget (16 times the size plus 1 MiB), the
// tensor budget (8 times), with room for Go's size classes and map growth.
func allowedBytes(size int) uint64 { return uint64(32*size + 4<<20) }

// TestHostileFilesBounded reads files built to exhaust memory and checks that the
// bytes allocated while rejecting each (runtime.MemStats.TotalAlloc, which counts
// every allocation, so it bounds the peak) stay within allowedBytes of its size.
func TestHostileFilesBounded(t *testing.T) {
	for _, tt := range hostileFiles(t) {
		t.Run(tt.name, func(t *testing.T) {
			data := tt.data()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			sd, err := read(data)
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d-byte file: %d bytes allocated (%.1f times its size); %v", len(data), alloc, float64(alloc)/float64(len(data)), err)
			require.Error(t, err)
			assert.Nil(t, sd)
			assert.LessOrEqual(t, alloc, allowedBytes(len(data)), "bytes allocated while rejecting a %d-byte file", len(data))
		})
	}
}

// TestLoadLimits checks the limits that the PyTorch readers add to the
// unpickler's: each stops a file that exceeds it with an error naming it.
func TestLoadLimits(t *testing.T) {
	const mib = 1 << 20
	storage0 := map[string][]byte{"0": make([]byte, 4)}
	dims := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = 1
		}
		return s
	}
	// A dict of 4 values at each of 10 levels, each the level below: 4^10 paths
	// to a None, through more than a million values.
	shared := &pickleBuilder{}
	shared.op("\x80\x02}").put(0).op("0N").put(1).op("0")
	for l := range 10 {
		shared.op("}(")
		for k := range 4 {
			shared.str(strconv.Itoa(k)).get(1 + l)
		}
		shared.op("u").put(2 + l).op("0")
	}
	shared.get(0).op("(").str("sd").get(11).op("u.")

	tests := []struct {
		name string
		data []byte
		want error
		msg  string
	}{
		{"data.pkl inflates past 4 times the file", deflatedPickle(t, lit("\x80\x02"), run('N', 64*mib), lit(".")),
			ErrTooLarge, "archive/data.pkl inflates to 67108867 bytes, more than the limit of"},
		{"tensors past 8 times the file", deflatedStorages(t, 20, 450_000, mib, false),
			ErrTooLarge, "tensors need more than"},
		{"a tensor of 65 dimensions", torchZip(t, tensorPickle(1, dims(65), dims(65)).op(".").Bytes(), "little", storage0),
			ErrTooLarge, "65 dimensions, more than the limit of 64"},
		{"a storage key of 65 bytes", torchZip(t, typedTensorPickle("FloatStorage", strings.Repeat("7", 65), 1, dims(1), dims(1)).op(".").Bytes(), "little", storage0),
			ErrCorrupt, "storage key of 65 bytes, more than the limit of 64"},
		{"a million paths through shared dicts", torchZip(t, shared.Bytes(), "little", nil),
			ErrTooLarge, "more than 1048576 values (the limit)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sd, err := read(tt.data)
			require.ErrorIs(t, err, tt.want)
			assert.Nil(t, sd)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
	t.Run("a deflated storage within 8 times the file", func(t *testing.T) {
		sd, err := read(deflatedStorages(t, 2, 450_000, mib, false))
		require.NoError(t, err)
		require.Len(t, sd["w1"].Data, 450_000)
		assert.Equal(t, float32(0), sd["w1"].Data[1000])
	})
}
