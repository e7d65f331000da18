package checkpoint

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const refDir = "../../testdata/reference"

func readRef(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(refDir, name))
	require.NoError(t, err)
	return b
}

func read(b []byte) (map[string]Tensor, error) { return Read(bytes.NewReader(b), int64(len(b))) }

// TestLoadFormats loads every reference checkpoint and checks what each format
// and dtype turns into.
func TestLoadFormats(t *testing.T) {
	tests := []struct {
		file  string
		keys  int
		dtype DType
		key   string // a key that must be present
	}{
		{"s2_zip.pt", 50, F32, "layer2.1.bn2.running_var"},
		{"s3_legacy.pt", 92, F32, "layer3.2.conv2.weight"},
		{"s4_safetensors.safetensors", 86, F32, "layer4.0.downsample.1.bias"},
		{"s1_nested_module.pth", 50, F32, "state_dict.module.fc.weight"},
		{"s2_f16_zip.pt", 56, F16, "fc.weight"},
		{"s2_bf16_legacy.pt", 38, BF16, "fc.weight"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			sd, err := Load(filepath.Join(refDir, tt.file))
			require.NoError(t, err)
			assert.Len(t, sd, tt.keys)
			require.Contains(t, sd, tt.key)
			assert.Equal(t, tt.dtype, sd[tt.key].DType)
			for k, v := range sd {
				assert.Equal(t, v.Numel(), len(v.Data), "tensor %s: Numel() = %d, len(Data) = %d", k, v.Numel(), len(v.Data))
				if v.DType == I64 {
					require.Empty(t, v.Shape, "integer tensor %s", k)
					assert.GreaterOrEqual(t, v.Data[0], float32(1), "num_batches_tracked %s", k)
				}
			}
			_, err = ResNet(sd)
			require.NoError(t, err)
		})
	}
}

// TestTorchViews covers what the reference files do not: strided and offset views,
// shared storages, byte order and dtype conversion.
func TestTorchViews(t *testing.T) {
	le, be := binary.LittleEndian, binary.BigEndian
	f64 := func(v ...float64) []byte {
		var b bytes.Buffer
		binary.Write(&b, le, v)
		return b.Bytes()
	}
	tests := []struct {
		name      string
		ts        []fakeTensor
		byteorder string
		storages  map[string][]byte
		want      map[string]Tensor
	}{
		{
			name:     "contiguous",
			ts:       []fakeTensor{{key: "w", storage: "0", storageType: "FloatStorage", numel: 6, shape: []int{2, 3}, stride: []int{3, 1}}},
			storages: map[string][]byte{"0": f32bytes(le, 1, 2, 3, 4, 5, 6)},
			want:     map[string]Tensor{"w": {Shape: []int{2, 3}, Data: []float32{1, 2, 3, 4, 5, 6}, DType: F32}},
		},
		{
			name:     "transposed",
			ts:       []fakeTensor{{key: "w", storage: "0", storageType: "FloatStorage", numel: 6, shape: []int{3, 2}, stride: []int{1, 3}}},
			storages: map[string][]byte{"0": f32bytes(le, 1, 2, 3, 4, 5, 6)},
			want:     map[string]Tensor{"w": {Shape: []int{3, 2}, Data: []float32{1, 4, 2, 5, 3, 6}, DType: F32}},
		},
		{
			name: "shared storage with offsets",
			ts: []fakeTensor{
				{key: "a", storage: "0", storageType: "FloatStorage", numel: 5, offset: 1, shape: []int{2}, stride: []int{1}},
				{key: "b", storage: "0", storageType: "FloatStorage", numel: 5, offset: 3, shape: []int{2}, stride: []int{1}},
			},
			storages: map[string][]byte{"0": f32bytes(le, 0, 1, 2, 3, 4)},
			want: map[string]Tensor{
				"a": {Shape: []int{2}, Data: []float32{1, 2}, DType: F32},
				"b": {Shape: []int{2}, Data: []float32{3, 4}, DType: F32},
			},
		},
		{
			name:      "big endian",
			ts:        []fakeTensor{{key: "w", storage: "0", storageType: "FloatStorage", numel: 2, shape: []int{2}, stride: []int{1}}},
			byteorder: "big",
			storages:  map[string][]byte{"0": f32bytes(be, 1.5, -2)},
			want:      map[string]Tensor{"w": {Shape: []int{2}, Data: []float32{1.5, -2}, DType: F32}},
		},
		{
			name:     "float64 and int64 scalar",
			ts:       []fakeTensor{{key: "d", storage: "0", storageType: "DoubleStorage", numel: 2, shape: []int{2}, stride: []int{1}}, {key: "n", storage: "1", storageType: "LongStorage", numel: 1, shape: []int{}, stride: []int{}}},
			storages: map[string][]byte{"0": f64(0.25, -3), "1": binary.LittleEndian.AppendUint64(nil, 42)},
			want: map[string]Tensor{
				"d": {Shape: []int{2}, Data: []float32{0.25, -3}, DType: F64},
				"n": {Shape: []int{}, Data: []float32{42}, DType: I64},
			},
		},
		{
			name:     "empty tensor",
			ts:       []fakeTensor{{key: "e", storage: "0", storageType: "FloatStorage", numel: 0, shape: []int{0, 4}, stride: []int{4, 1}}},
			storages: map[string][]byte{"0": nil},
			want:     map[string]Tensor{"e": {Shape: []int{0, 4}, Data: []float32{}, DType: F32}},
		},
		{
			// fuzz crasher: an empty tensor far past the end of its storage
			name:     "empty tensor past the storage",
			ts:       []fakeTensor{{key: "e", storage: "0", storageType: "FloatStorage", numel: 2, offset: 3584, shape: []int{3, 0}, stride: []int{1, 60930}}},
			storages: map[string][]byte{"0": f32bytes(le, 1, 2)},
			want:     map[string]Tensor{"e": {Shape: []int{3, 0}, Data: []float32{}, DType: F32}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sd, err := read(torchZip(t, torchPickle(tt.ts), tt.byteorder, tt.storages))
			require.NoError(t, err)
			assert.Equal(t, tt.want, sd)
		})
	}
}

// TestLegacyViews reads a legacy file whose tensors use storage views (view
// metadata in the persistent ID), as pre-0.4 torch wrote them.
func TestLegacyViews(t *testing.T) {
	pkl := torchPickle([]fakeTensor{
		{key: "a", storage: "0", storageType: "FloatStorage", numel: 6, shape: []int{2}, stride: []int{1}, view: []int{1, 3}},
		{key: "b", storage: "0", storageType: "FloatStorage", numel: 6, offset: 1, shape: []int{2}, stride: []int{1}, view: []int{3, 3}},
	})
	data := legacyFile(pkl, []string{"0"}, [][]byte{storageBytes(4, 10, 11, 12, 13, 14, 15)})
	sd, err := read(data)
	require.NoError(t, err)
	assert.Equal(t, map[string]Tensor{
		"a": {Shape: []int{2}, Data: []float32{11, 12}, DType: F32},
		"b": {Shape: []int{2}, Data: []float32{14, 15}, DType: F32},
	}, sd)

	bad := torchPickle([]fakeTensor{{key: "a", storage: "0", storageType: "FloatStorage", numel: 6, shape: []int{2}, stride: []int{1}, view: []int{5, 3}}})
	_, err = read(legacyFile(bad, []string{"0"}, [][]byte{storageBytes(4, 10, 11, 12, 13, 14, 15)}))
	assert.ErrorIs(t, err, ErrCorrupt)
	assert.ErrorContains(t, err, "view of storage 0 out of range")
}

// TestSafetensorsPickleLikeHeader: a header of 0x280 bytes makes the file start
// with 0x80 0x02, like a pickle; it must still read as safetensors.
func TestSafetensorsPickleLikeHeader(t *testing.T) {
	h := `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`
	h += strings.Repeat(" ", 0x280-len(h))
	data := append(binary.LittleEndian.AppendUint64(nil, uint64(len(h))), h...)
	data = append(data, f32bytes(binary.LittleEndian, 2.5)...)
	require.Equal(t, []byte{0x80, 0x02}, data[:2])
	sd, err := read(data)
	require.NoError(t, err)
	assert.Equal(t, map[string]Tensor{"a": {Shape: []int{1}, Data: []float32{2.5}, DType: F32}}, sd)
}

func TestDecodeLong(t *testing.T) {
	tests := []struct {
		in   []byte
		want string
	}{
		{nil, "0"}, {[]byte{0xff}, "-1"}, {[]byte{0x7f}, "127"}, {[]byte{0x00, 0x80}, "-32768"},
		{[]byte{0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19}, "119547037146038801333356"},
		{[]byte{0, 0, 0, 0, 0, 0, 0, 0, 0xff}, "-18446744073709551616"},
	}
	for _, tt := range tests {
		var got string
		switch v := decodeLong(tt.in).(type) {
		case int64:
			got = big.NewInt(v).String()
		case *big.Int:
			got = v.String()
		}
		assert.Equal(t, tt.want, got, "decodeLong(% x)", tt.in)
	}
}

// rezip copies a zip archive, passing each entry's bytes through edit.
func rezip(t *testing.T, in []byte, edit func(name string, b []byte) []byte) []byte {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(in), int64(len(in)))
	require.NoError(t, err)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range zr.File {
		b, err := readEntry(f, 1<<30)
		require.NoError(t, err)
		if b = edit(f.Name, b); b == nil {
			continue
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: f.Name, Method: zip.Store})
		require.NoError(t, err)
		_, err = w.Write(b)
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func TestLoadErrors(t *testing.T) {
	zipFile := readRef(t, "s2_zip.pt")
	legacy := readRef(t, "s2_bf16_legacy.pt")
	st := readRef(t, "s4_safetensors.safetensors")
	// flip one byte in the middle of the storage of conv1.weight
	corrupt := bytes.Clone(zipFile)
	{
		zr, err := zip.NewReader(bytes.NewReader(corrupt), int64(len(corrupt)))
		require.NoError(t, err)
		for _, f := range zr.File {
			if f.Name == "s2_zip/data/0" {
				off, err := f.DataOffset()
				require.NoError(t, err)
				corrupt[off+100] ^= 0x40
			}
		}
	}
	replacePkl := func(old, new string) []byte {
		return rezip(t, zipFile, func(name string, b []byte) []byte {
			if filepath.Base(name) == "data.pkl" {
				return bytes.Replace(b, []byte(old), []byte(new), -1)
			}
			return b
		})
	}
	stHeader := func(h string) []byte {
		return append(binary.LittleEndian.AppendUint64(nil, uint64(len(h))), h+"\x00\x00\x00\x00"...)
	}
	tests := []struct {
		name string
		data []byte
		want error
		msg  string
	}{
		{"empty", nil, ErrUnknownFormat, "0 bytes"},
		{"text", []byte("hello, this is not a checkpoint"), ErrUnknownFormat, "starts with"},
		{"zip truncated", zipFile[:len(zipFile)/2], ErrCorrupt, "zip"},
		{"zip storage corrupted", corrupt, ErrCorrupt, "CRC-32"},
		{"zip without data.pkl", rezip(t, zipFile, func(n string, b []byte) []byte {
			if filepath.Base(n) == "data.pkl" {
				return nil
			}
			return b
		}), ErrUnknownFormat, "without data.pkl"},
		{"zip storage missing", rezip(t, zipFile, func(n string, b []byte) []byte {
			if n == "s2_zip/data/3" {
				return nil
			}
			return b
		}), ErrCorrupt, "s2_zip/data/3 missing"},
		{"zip storage short", rezip(t, zipFile, func(n string, b []byte) []byte {
			if n == "s2_zip/data/0" {
				return b[:len(b)-4]
			}
			return b
		}), ErrCorrupt, "s2_zip/data/0 holds"},
		{"bad pickle", replacePkl("\x80\x02", "\x80\x02\xff"), ErrCorrupt, "unsupported opcode 0xff"},
		{"pickle truncated", rezip(t, zipFile, func(n string, b []byte) []byte {
			if filepath.Base(n) == "data.pkl" {
				return b[:len(b)/2]
			}
			return b
		}), ErrCorrupt, "unexpected end of data"},
		{"unsupported dtype", replacePkl("torch\nFloatStorage\n", "torch\nComplexFloatStorage\n"), ErrUnsupportedDType, "ComplexFloatStorage"},
		{"bad byteorder", rezip(t, zipFile, func(n string, b []byte) []byte {
			if filepath.Base(n) == "byteorder" {
				return []byte("middle")
			}
			return b
		}), ErrCorrupt, "byteorder"},
		{"legacy truncated", legacy[:len(legacy)-100], ErrCorrupt, "run past the end"},
		{"legacy pickle truncated", legacy[:2000], ErrCorrupt, "more than the file holds"},
		{"legacy pickle cut", legacy[:300], ErrCorrupt, "unexpected end of data"},
		{"legacy bad magic", append([]byte("\x80\x02K\x05."), legacy[14:]...), ErrUnknownFormat, "magic number"},
		{"safetensors truncated", st[:len(st)-10], ErrCorrupt, "outside"},
		{"safetensors header too long", append(binary.LittleEndian.AppendUint64(nil, 1<<40), "{}"...), ErrCorrupt, "header of"},
		{"safetensors bad json", stHeader(`{"a": [`), ErrCorrupt, "safetensors header"},
		{"safetensors bad dtype", stHeader(`{"a":{"dtype":"C64","shape":[1],"data_offsets":[0,4]}}`), ErrUnsupportedDType, "C64"},
		{"safetensors shape mismatch", stHeader(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`), ErrCorrupt, "needs 8 bytes"},
		{"safetensors overlap", stHeader(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`), ErrCorrupt, "overlap"},
		{"safetensors negative dim", stHeader(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`), ErrCorrupt, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sd, err := read(tt.data)
			require.Error(t, err)
			assert.Nil(t, sd)
			assert.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
	t.Run("missing file", func(t *testing.T) {
		_, err := Load(filepath.Join(t.TempDir(), "absent.pt"))
		require.ErrorIs(t, err, os.ErrNotExist)
		assert.Contains(t, err.Error(), "checkpoint: ")
	})
}

// TestNotStateDict: a PyTorch file whose pickle is not a dict (None, a number, a
// list of tensors, a whole pickled model) is ErrNotStateDict, naming what it
// holds; a dict without tensors is an empty state dict.
func TestNotStateDict(t *testing.T) {
	storages := map[string][]byte{"0": f32bytes(binary.LittleEndian, 1, 2)}
	// torchPickle's OrderedDict of one tensor, made a tuple of its key and tensor
	tensorList := torchPickle([]fakeTensor{{key: "w", storage: "0", storageType: "FloatStorage", numel: 2, shape: []int{2}, stride: []int{1}}})
	tests := []struct {
		name string
		data []byte
		msg  string
	}{
		{"zip of None", torchZip(t, []byte("\x80\x02N."), "", nil), "the pickle holds None"},
		{"zip of an int", torchZip(t, []byte("\x80\x02K\x07."), "", nil), "the pickle holds int"},
		{"zip of a list", torchZip(t, []byte("\x80\x02](K\x01K\x02e."), "", nil), "the pickle holds list"},
		{"zip of a tuple of tensors", torchZip(t, bytes.Replace(bytes.Replace(tensorList,
			[]byte("q\x00)R("), []byte("q\x000("), 1), []byte("u."), []byte("t."), 1), "little", storages), "the pickle holds tuple"},
		{"zip of a whole model", torchZip(t, []byte("\x80\x02ctorchvision.models.resnet\nResNet\n)\x81}(X\x08\x00\x00\x00trainingq\x01\x88ub."), "", nil),
			"the pickle holds torchvision.models.resnet.ResNet object"},
		{"legacy file of None", legacyFile([]byte("\x80\x02N."), nil, nil), "the pickle holds None"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sd, err := read(tt.data)
			require.ErrorIs(t, err, ErrNotStateDict)
			assert.Nil(t, sd)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
	t.Run("empty OrderedDict", func(t *testing.T) {
		sd, err := read(torchZip(t, []byte("\x80\x02ccollections\nOrderedDict\n)R."), "", nil))
		require.NoError(t, err)
		assert.Empty(t, sd)
	})
}
