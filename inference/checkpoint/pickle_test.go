package checkpoint

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"go/ast"
	"go/parser"
	"go/token"
	"math/big"
	"os"
	"path/filepath"
	"strings"
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
	u := newUnpickler(bufio.NewReader(bytes.NewReader(pkl)), int64(len(pkl)), pickleHooks{})
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

// TestUnpicklerStandsAlone: the unpickler knows Python's types and nothing of
// torch. Without hooks a call of torch's rebuild function is an opaque object; a
// call hook decides what a global makes; and pickle.go uses no name that the
// torch files declare.
func TestUnpicklerStandsAlone(t *testing.T) {
	t.Run("no hooks", func(t *testing.T) {
		pkl := "\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(K\x01K\x00))tR."
		v, err := newUnpickler(bufio.NewReader(strings.NewReader(pkl)), int64(len(pkl)), pickleHooks{}).load()
		require.NoError(t, err)
		assert.Equal(t, &object{class: global{"torch._utils", "_rebuild_tensor_v2"}, args: tuple{int64(1), int64(0), tuple{}, tuple{}}}, v)
	})
	t.Run("call hook", func(t *testing.T) {
		type point struct{ x, y int64 }
		var calls []global
		hooks := pickleHooks{call: func(g global, args tuple) (any, error) {
			calls = append(calls, g)
			if g == (global{"geometry", "Point"}) {
				return point{args[0].(int64), args[1].(int64)}, nil
			}
			return callBuiltin(g, args)
		}}
		pkl := "\x80\x02ccollections\nOrderedDict\n)R(X\x01\x00\x00\x00pcgeometry\nPoint\nK\x03K\x04\x86Ru."
		u := newUnpickler(bufio.NewReader(strings.NewReader(pkl)), int64(len(pkl)), hooks)
		v, err := u.load()
		require.NoError(t, err)
		d, ok := v.(*dict)
		require.True(t, ok, "OrderedDict, through callBuiltin, is %s", typeName(v))
		p, ok := d.get("p")
		require.True(t, ok)
		assert.Equal(t, point{3, 4}, p)
		assert.Equal(t, []global{{"collections", "OrderedDict"}, {"geometry", "Point"}}, calls)
	})
	t.Run("pickle.go uses no torch name", func(t *testing.T) {
		fset := token.NewFileSet()
		torchNames := make(map[string]string)
		torchFiles, err := filepath.Glob("torch*.go")
		require.NoError(t, err)
		require.NotEmpty(t, torchFiles)
		for _, name := range torchFiles {
			f, err := parser.ParseFile(fset, name, nil, 0)
			require.NoError(t, err)
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if d.Recv == nil {
						torchNames[d.Name.Name] = name
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							torchNames[s.Name.Name] = name
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.Name != "_" {
									torchNames[n.Name] = name
								}
							}
						}
					}
				}
			}
		}
		f, err := parser.ParseFile(fset, "pickle.go", nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				if file, ok := torchNames[id.Name]; ok {
					t.Errorf("%s uses %s, declared in %s", fset.Position(id.Pos()), id.Name, file)
				}
			}
			return true
		})
	})
}
