package checkpoint

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"math/big"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPickleProtocols reads the state dict that testdata/make_pickles.py wrote in
// pickle protocols 1, 2, 4 and 5 (STACK_GLOBAL, MEMOIZE, FRAME, _rebuild_parameter).
func TestPickleProtocols(t *testing.T) {
	storages := map[string][]byte{
		"0": f32bytes(binary.LittleEndian, 1, 2, 3, 4, 5, 6),
		"1": {0x00, 0x3c, 0x00, 0x40, 0x00, 0x42, 0x00, 0x44}, // float16 1, 2, 3, 4
	}
	want := map[string]Tensor{
		"w": {Shape: []int{2, 3}, Data: []float32{1, 2, 3, 4, 5, 6}, DType: F32},
		"t": {Shape: []int{3, 2}, Data: []float32{1, 4, 2, 5, 3, 6}, DType: F32},
		"p": {Shape: []int{2}, Data: []float32{2, 3}, DType: F16},
	}
	for _, proto := range []string{"1", "2", "4", "5"} {
		t.Run("protocol="+proto, func(t *testing.T) {
			pkl, err := os.ReadFile(filepath.Join("testdata", "pickle-p"+proto+".pkl"))
			require.NoError(t, err)
			sd, err := read(torchZip(t, pkl, "little", storages))
			require.NoError(t, err)
			assert.Equal(t, want, sd)
		})
	}
}

// TestPickleValues checks the values of a protocol 0 (text opcodes) pickle.
func TestPickleValues(t *testing.T) {
	pkl, err := os.ReadFile(filepath.Join("testdata", "pickle-p0-meta.pkl"))
	require.NoError(t, err)
	u := newUnpickler(bufio.NewReader(bytes.NewReader(pkl)), int64(len(pkl)), nil)
	v, err := u.load()
	require.NoError(t, err)
	d, ok := v.(*dict)
	require.True(t, ok, "top level is %s, want dict", typeName(v))
	get := func(d *dict, k string) any {
		x, ok := d.get(k)
		require.True(t, ok, "key %q", k)
		return x
	}
	meta, ok := get(d, "meta").(*dict)
	require.True(t, ok)
	assert.Equal(t, int64(3), get(meta, "epoch"))
	assert.Equal(t, 0.1, get(meta, "lr"))
	assert.Equal(t, "x", get(meta, "name"))
	assert.Equal(t, &list{items: []any{"a", "b"}}, get(meta, "tags"))
	assert.Equal(t, 0, new(big.Int).Lsh(big.NewInt(1), 70).Cmp(get(meta, "big").(*big.Int)), "big = 2**70")
	assert.Equal(t, int64(-5), get(d, "neg"))
	assert.Equal(t, -1.5e-3, get(d, "f"))
	assert.Equal(t, true, get(d, "b"))

	sd, err := read(torchZip(t, pkl, "", nil))
	require.NoError(t, err)
	assert.Empty(t, sd, "a pickle without tensors gives an empty state dict")
}

func TestPickleErrors(t *testing.T) {
	tests := []struct {
		name, pkl, msg string
	}{
		{"empty", "", "unexpected end of data"},
		{"no stop", "\x80\x02K\x01", "unexpected end of data"},
		{"stack underflow", "\x80\x02t.", "no mark"},
		{"pop empty", "\x80\x020.", "stack underflow"},
		{"memo miss", "\x80\x02h\x05.", "memo key 5 not found"},
		{"protocol 9", "\x80\x09N.", "unsupported protocol 9"},
		{"reduce non-tuple", "\x80\x02ccollections\nOrderedDict\nK\x01R.", "REDUCE with int arguments"},
		{"setitem on list", "\x80\x02]K\x01K\x02s.", "SETITEM on list"},
		{"persid without storage", "\x80\x02X\x01\x00\x00\x00xQ.", "persistent ID"},
		{"huge string", "\x80\x02X\xff\xff\xff\x7f", "exceeds"},
		{"odd dict items", "\x80\x02(K\x01d.", "odd number"},
		{"bad text int", "I12x\n.", "bad integer"},
		{"rebuild without storage", "\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(K\x01K\x00)))tR.", "storage is int"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sd, err := read(torchZip(t, []byte(tt.pkl), "", nil))
			require.Error(t, err)
			assert.Nil(t, sd)
			assert.ErrorIs(t, err, ErrCorrupt)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
}
