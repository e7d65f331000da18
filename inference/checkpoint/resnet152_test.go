package checkpoint

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// namedShape is one entry of a state dict: its name, dtype and shape.
type namedShape struct {
	name  string
	dtype DType
	shape []int
}

func (n namedShape) numel() int {
	p := 1
	for _, d := range n.shape {
		p *= d
	}
	return p
}

// resnet152Tensors lists torchvision.models.resnet152().state_dict() in order,
// built from the architecture (Bottleneck blocks 3, 8, 36, 3 of widths 64 to 512,
// expansion 4, a downsample in each stage's first block). testdata/make_pickles.py
// builds the same list in Python for pickle-resnet152.pkl.
func resnet152Tensors() []namedShape {
	var ts []namedShape
	conv := func(name string, out, in, k int) {
		ts = append(ts, namedShape{name + ".weight", F32, []int{out, in, k, k}})
	}
	bn := func(name string, c int) {
		for _, p := range []string{"weight", "bias", "running_mean", "running_var"} {
			ts = append(ts, namedShape{name + "." + p, F32, []int{c}})
		}
		ts = append(ts, namedShape{name + ".num_batches_tracked", I64, []int{}})
	}
	conv("conv1", 64, 3, 7)
	bn("bn1", 64)
	in := 64
	for s, stage := range []struct{ width, blocks int }{{64, 3}, {128, 8}, {256, 36}, {512, 3}} {
		w := stage.width
		for b := range stage.blocks {
			p := fmt.Sprintf("layer%d.%d.", s+1, b)
			conv(p+"conv1", w, in, 1)
			bn(p+"bn1", w)
			conv(p+"conv2", w, w, 3)
			bn(p+"bn2", w)
			conv(p+"conv3", 4*w, w, 1)
			bn(p+"bn3", 4*w)
			if b == 0 {
				conv(p+"downsample.0", 4*w, in, 1)
				bn(p+"downsample.1", 4*w)
			}
			in = 4 * w
		}
	}
	ts = append(ts, namedShape{"fc.weight", F32, []int{1000, 2048}}, namedShape{"fc.bias", F32, []int{1000}})
	return ts
}

// TestResNet152Shaped loads a file with the pickle torch.save writes for a
// torchvision ResNet-152 state dict (testdata/pickle-resnet152.pkl, from
// make_pickles.py) and storages of the real sizes (241 MB in all), written as
// torch.save's zip; storage i holds the value i. It logs what the pickle needs
// against the unpickler's limits, and checks that each limit has a wide margin.
func TestResNet152Shaped(t *testing.T) {
	want := resnet152Tensors()
	require.Len(t, want, 932)
	pkl, err := os.ReadFile(filepath.Join("testdata", "pickle-resnet152.pkl"))
	require.NoError(t, err)

	path := filepath.Join(t.TempDir(), "resnet152.pt")
	f, err := os.Create(path)
	require.NoError(t, err)
	zw := zip.NewWriter(f)
	add := func(name string, data []byte) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
		require.NoError(t, err)
		_, err = w.Write(data)
		require.NoError(t, err)
	}
	add("archive/data.pkl", pkl)
	add("archive/byteorder", []byte("little"))
	var buf []byte
	var params, largest int
	for i, ts := range want {
		n := ts.numel()
		params += n
		largest = max(largest, 4*n)
		buf = buf[:0]
		for range n {
			if ts.dtype == I64 {
				buf = binary.LittleEndian.AppendUint64(buf, uint64(i))
			} else {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(float32(i)))
			}
		}
		add("archive/data/"+strconv.Itoa(i), buf)
	}
	add("archive/version", []byte("3\n"))
	require.NoError(t, zw.Close())
	require.NoError(t, f.Close())
	st, err := os.Stat(path)
	require.NoError(t, err)

	start := time.Now()
	sd, err := Load(path)
	elapsed := time.Since(start)
	require.NoError(t, err)
	require.Len(t, sd, len(want))
	for i, ts := range want {
		got, ok := sd[ts.name]
		require.True(t, ok, "missing %s", ts.name)
		require.Equal(t, ts.shape, got.Shape, "shape of %s", ts.name)
		require.Equal(t, ts.dtype, got.DType, "dtype of %s", ts.name)
		n := len(got.Data)
		require.Equal(t, ts.numel(), n, "elements of %s", ts.name)
		for _, j := range []int{0, n / 2, n - 1} {
			require.Equal(t, float32(i), got.Data[j], "%s[%d]", ts.name, j)
		}
	}

	// What the pickle needs, against the limits that a file of this size gets.
	mem := valueBudget(st.Size())
	loader := newTorchLoader(st.Size(), mem)
	u := newUnpickler(bufio.NewReader(bytes.NewReader(pkl)), int64(len(pkl)), mem, loader.hooks())
	obj, err := u.load()
	require.NoError(t, err)
	_, err = stateDictTensors(obj, mem)
	require.NoError(t, err)
	used := mem.limit - mem.left
	lim := u.lim
	t.Logf("ResNet-152 state dict: %d tensors, %d parameters, largest tensor %d bytes, file %d bytes, Load %v (wall clock, this machine)",
		len(want), params, largest, st.Size(), elapsed.Round(time.Millisecond))
	t.Logf("its pickle: %d bytes (limit %d); stack %d values (limit %d); %d marks (limit %d); memo %d entries (limit %d); values %d bytes (budget %d)",
		len(pkl), pickleLimit(st.Size()), u.maxStack, lim.stack, u.maxMarks, lim.marks, u.memoLen(), lim.memo, used, mem.limit)
	assert.Less(t, int64(len(pkl))*100, pickleLimit(st.Size()), "pickle size against its limit")
	assert.Less(t, u.maxStack*100, lim.stack, "stack against its limit")
	assert.Less(t, u.maxMarks*100, lim.marks, "marks against their limit")
	assert.Less(t, u.memoLen()*100, lim.memo, "memo against its limit")
	assert.Less(t, used*100, mem.limit, "values against their budget")
}

// TestResNet152Real loads a real torchvision ResNet-152 checkpoint made by
// torch.save(torchvision.models.resnet152().state_dict(), path), named by
// INFERBENCH_RESNET152, and checks its keys, shapes and dtypes against
// resnet152Tensors. If path.json exists (a JSON object mapping each key to
// [shape, float64 sum of its values]), every tensor's sum is checked too.
func TestResNet152Real(t *testing.T) {
	path := os.Getenv("INFERBENCH_RESNET152")
	if path == "" {
		t.Skip("INFERBENCH_RESNET152 not set: it names a torch.save(torchvision.models.resnet152().state_dict()) file")
	}
	start := time.Now()
	sd, err := Load(path)
	elapsed := time.Since(start)
	require.NoError(t, err)
	want := resnet152Tensors()
	require.Len(t, sd, len(want))
	for _, ts := range want {
		got, ok := sd[ts.name]
		require.True(t, ok, "missing %s", ts.name)
		assert.Equal(t, ts.shape, got.Shape, "shape of %s", ts.name)
		assert.Equal(t, ts.dtype, got.DType, "dtype of %s", ts.name)
		assert.Len(t, got.Data, ts.numel(), "elements of %s", ts.name)
	}
	st, err := os.Stat(path)
	require.NoError(t, err)
	t.Logf("Load(%s): %d tensors, %d bytes in %v (wall clock)", path, len(sd), st.Size(), elapsed.Round(time.Millisecond))

	sums, err := os.ReadFile(path + ".json")
	if os.IsNotExist(err) {
		t.Logf("%s.json absent: values not checked", path)
		return
	}
	require.NoError(t, err)
	var ref map[string][2]json.RawMessage
	require.NoError(t, json.Unmarshal(sums, &ref))
	require.Len(t, ref, len(want))
	for _, ts := range want {
		var shape []int
		var sum float64
		require.NoError(t, json.Unmarshal(ref[ts.name][0], &shape), "shape of %s in the JSON", ts.name)
		require.NoError(t, json.Unmarshal(ref[ts.name][1], &sum), "sum of %s in the JSON", ts.name)
		if len(shape) == 0 {
			shape = []int{}
		}
		assert.Equal(t, shape, sd[ts.name].Shape, "PyTorch's shape of %s", ts.name)
		var got, abs float64
		for _, v := range sd[ts.name].Data {
			got += float64(v)
			abs += math.Abs(float64(v))
		}
		assert.InDelta(t, sum, got, 1e-9*abs+1e-12, "sum of %s", ts.name)
	}
}
