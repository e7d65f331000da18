package checkpoint

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeTensor describes one tensor of a hand-made torch.save zip.
type fakeTensor struct {
	key, storage, storageType string
	numel, offset             int
	shape, stride             []int
	// view, if set, makes a legacy storage view: elements view[0]..view[0]+view[1].
	view []int
}

// torchPickle writes data.pkl as torch.save does (protocol 2): an OrderedDict of
// _rebuild_tensor_v2 calls whose storages are persistent IDs.
func torchPickle(ts []fakeTensor) []byte {
	var b bytes.Buffer
	str := func(s string) {
		b.WriteByte('X')
		binary.Write(&b, binary.LittleEndian, uint32(len(s)))
		b.WriteString(s)
	}
	num := func(n int) {
		b.WriteByte('J')
		binary.Write(&b, binary.LittleEndian, int32(n))
	}
	ints := func(v []int) {
		b.WriteByte('(')
		for _, n := range v {
			num(n)
		}
		b.WriteByte('t')
	}
	b.WriteString("\x80\x02ccollections\nOrderedDict\nq\x00)R(")
	for _, t := range ts {
		str(t.key)
		b.WriteString("ctorch._utils\n_rebuild_tensor_v2\n((")
		str("storage")
		b.WriteString("ctorch\n" + t.storageType + "\n")
		str(t.storage)
		str("cpu")
		num(t.numel)
		if t.view != nil {
			b.WriteByte('(')
			str(t.storage + "-view")
			num(t.view[0])
			num(t.view[1])
			b.WriteByte('t')
		}
		b.WriteString("tQ")
		num(t.offset)
		ints(t.shape)
		ints(t.stride)
		b.WriteString("\x89h\x00)RtR")
	}
	b.WriteString("u.")
	return b.Bytes()
}

// torchZip writes a torch.save-style zip with the given data.pkl, byte order and
// storages (key -> bytes).
func torchZip(t testing.TB, pkl []byte, byteorder string, storages map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(name string, data []byte) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
		require.NoError(t, err)
		_, err = w.Write(data)
		require.NoError(t, err)
	}
	add("archive/data.pkl", pkl)
	if byteorder != "" {
		add("archive/byteorder", []byte(byteorder))
	}
	for k, v := range storages {
		add("archive/data/"+k, v)
	}
	add("archive/version", []byte("3\n"))
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func f32bytes(bo binary.ByteOrder, v ...float32) []byte {
	var b bytes.Buffer
	binary.Write(&b, bo, v)
	return b.Bytes()
}
