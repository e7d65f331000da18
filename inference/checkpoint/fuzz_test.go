package checkpoint

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the generated seed corpus under testdata/fuzz")

var sentinels = []error{ErrUnknownFormat, ErrCorrupt, ErrUnsupportedDType, ErrMissingKey, ErrUnexpectedKey, ErrShape, ErrTooLarge, ErrNotStateDict}

// checkLoad is the fuzz property: Read either fails with one of the package's
// errors or returns tensors whose data matches their shapes, and ResNet never
// panics on them.
func checkLoad(t *testing.T, data []byte) {
	sd, err := read(data)
	if err != nil {
		for _, s := range sentinels {
			if errors.Is(err, s) {
				return
			}
		}
		t.Fatalf("Read error %q wraps none of the package's errors", err)
	}
	for k, v := range sd {
		if v.Numel() != len(v.Data) {
			t.Fatalf("tensor %s: shape %v but %d values", k, v.Shape, len(v.Data))
		}
	}
	if _, err := ResNet(sd); err != nil && !strings.HasPrefix(err.Error(), "checkpoint: ") {
		t.Fatalf("ResNet error %q lacks the package prefix", err)
	}
}

// pickleHost wraps a data.pkl in a zip whose storages 0-7 hold 64 float32 each, so
// that the fuzzer reaches the unpickler and tensor views past the zip checks.
func pickleHost(t testing.TB, pkl []byte) []byte {
	st := make(map[string][]byte)
	for i := range 8 {
		st[fmt.Sprint(i)] = make([]byte, 256)
	}
	return torchZip(t, pkl, "little", st)
}

// smallPickle is a data.pkl with a strided view and a shared storage.
func smallPickle() []byte {
	return torchPickle([]fakeTensor{
		{key: "a", storage: "0", storageType: "FloatStorage", numel: 6, shape: []int{3, 2}, stride: []int{1, 3}},
		{key: "b", storage: "1", storageType: "HalfStorage", numel: 4, offset: 1, shape: []int{3}, stride: []int{1}},
		{key: "c", storage: "1", storageType: "HalfStorage", numel: 4, shape: []int{}, stride: []int{}},
	})
}

// legacyFile assembles a legacy torch.save file: magic, protocol, sys_info, the
// data pickle, the storage keys and the storages.
func legacyFile(pkl []byte, keys []string, storages [][]byte) []byte {
	var b bytes.Buffer
	b.WriteString("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.")
	b.WriteString("\x80\x02M\xe9\x03.")
	b.WriteString("\x80\x02}(X\x0d\x00\x00\x00little_endian\x88u.")
	b.Write(pkl)
	b.WriteString("\x80\x02]q\x00(")
	for _, k := range keys {
		b.WriteByte('X')
		binary.Write(&b, binary.LittleEndian, uint32(len(k)))
		b.WriteString(k)
	}
	b.WriteString("e.")
	for _, s := range storages {
		b.Write(s)
	}
	return b.Bytes()
}

func storageBytes(elemSize int, v ...float32) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(v)))
	switch elemSize {
	case 4:
		return append(b, f32bytes(binary.LittleEndian, v...)...)
	default:
		for range v {
			b = append(b, 0x00, 0x3c) // float16 1.0
		}
		return b
	}
}

// generatedPyTorchSeeds are small files for the corpus: valid ones and mutations.
func generatedPyTorchSeeds(t testing.TB) map[string][]byte {
	zipSmall := torchZip(t, smallPickle(), "little", map[string][]byte{
		"0": f32bytes(binary.LittleEndian, 1, 2, 3, 4, 5, 6),
		"1": {0, 0x3c, 0, 0x40, 0, 0x42, 0, 0x44},
	})
	legacy := legacyFile(smallPickle(), []string{"0", "1"}, [][]byte{
		storageBytes(4, 1, 2, 3, 4, 5, 6), storageBytes(2, 1, 1, 1, 1),
	})
	flip := func(b []byte, i int) []byte {
		c := bytes.Clone(b)
		c[i%len(c)] ^= 0x5a
		return c
	}
	seeds := map[string][]byte{
		"zip-small":           zipSmall,
		"zip-small-truncated": zipSmall[:len(zipSmall)*2/3],
		"zip-small-flipped":   flip(zipSmall, 70),
		"legacy-small":        legacy,
		"legacy-truncated":    legacy[:len(legacy)-7],
		"legacy-flipped":      flip(legacy, 300),
		"pickle-only":         smallPickle(),
	}
	return seeds
}

func generatedSafetensorsSeeds(t testing.TB) map[string][]byte {
	var buf bytes.Buffer
	require.NoError(t, WriteSafetensors(&buf, map[string]Tensor{
		"a": {Shape: []int{2, 3}, Data: []float32{1, 2, 3, 4, 5, 6}},
		"b": {Shape: []int{}, Data: []float32{7}},
		"c": {Shape: []int{0}, Data: []float32{}},
	}))
	valid := buf.Bytes()
	f16 := []byte(`{"__metadata__":{"format":"pt"},"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"i":{"dtype":"I64","shape":[1],"data_offsets":[4,12]}}`)
	mixed := append(binary.LittleEndian.AppendUint64(nil, uint64(len(f16))), f16...)
	mixed = append(mixed, 0, 0x3c, 0, 0xc0, 5, 0, 0, 0, 0, 0, 0, 0)
	return map[string][]byte{
		"valid":           valid,
		"valid-truncated": valid[:len(valid)-5],
		"mixed-dtypes":    mixed,
		"header-only":     valid[:8+int(binary.LittleEndian.Uint64(valid))],
	}
}

// TestWriteFuzzCorpus writes the generated seeds as go-fuzz corpus files when run
// with -update-corpus; otherwise it checks that they load as the fuzz property says.
func TestWriteFuzzCorpus(t *testing.T) {
	for target, seeds := range map[string]map[string][]byte{
		"FuzzLoadPyTorch":     generatedPyTorchSeeds(t),
		"FuzzLoadSafetensors": generatedSafetensorsSeeds(t),
	} {
		for name, data := range seeds {
			checkLoad(t, data)
			if *updateCorpus {
				dir := filepath.Join("testdata", "fuzz", target)
				require.NoError(t, os.MkdirAll(dir, 0o755))
				body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
				require.NoError(t, os.WriteFile(filepath.Join(dir, "seed-"+name), []byte(body), 0o644))
			}
		}
	}
	_, err := read(generatedPyTorchSeeds(t)["zip-small"])
	require.NoError(t, err, "the small zip seed must be valid")
	_, err = read(generatedPyTorchSeeds(t)["legacy-small"])
	require.NoError(t, err, "the small legacy seed must be valid")
	_, err = read(generatedSafetensorsSeeds(t)["mixed-dtypes"])
	require.NoError(t, err, "the mixed safetensors seed must be valid")
}

// FuzzLoadPyTorch feeds torch.save files (zip and legacy) to Read, and the same
// bytes as the data.pkl of an otherwise valid zip.
func FuzzLoadPyTorch(f *testing.F) {
	for _, name := range []string{"s2_zip.pt", "s2_f16_zip.pt", "s2_bf16_legacy.pt", "s1_nested_module.pth"} {
		data := readRef(f, name)
		f.Add(data)
		if zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data))); err == nil {
			for _, e := range zr.File {
				if strings.HasSuffix(e.Name, "data.pkl") {
					pkl, err := readEntry(e, 1<<20)
					require.NoError(f, err)
					f.Add(pkl)
				}
			}
		}
	}
	pickles, err := filepath.Glob(filepath.Join("testdata", "pickle-p*.pkl"))
	require.NoError(f, err)
	for _, p := range pickles {
		data, err := os.ReadFile(p)
		require.NoError(f, err)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkLoad(t, data)
		checkLoad(t, pickleHost(t, data))
	})
}

// FuzzLoadSafetensors feeds safetensors files to Read.
func FuzzLoadSafetensors(f *testing.F) {
	for _, name := range []string{"s2_zip.io.safetensors", "s2_bf16_legacy.io.safetensors"} {
		f.Add(readRef(f, name))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkLoad(t, data)
	})
}
