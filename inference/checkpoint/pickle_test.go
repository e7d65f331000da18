package checkpoint

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	u := newUnpickler(bufio.NewReader(bytes.NewReader(pkl)), int64(len(pkl)), valueBudget(int64(len(pkl))), pickleHooks{})
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

// unpickle runs the unpickler alone on pkl, with no hooks and a budget of the
// given size.
func unpickle(pkl []byte, budgetBytes int64) (any, *unpickler, error) {
	u := newUnpickler(bufio.NewReader(bytes.NewReader(pkl)), int64(len(pkl)), newBudget(budgetBytes, "the test's budget"), pickleHooks{})
	v, err := u.load()
	return v, u, err
}

// TestPickleLimits checks that each of the unpickler's limits stops a pickle
// that exceeds it with ErrTooLarge and a message naming the limit, at its
// default value (the budget is 4 GiB unless the case is about the budget).
func TestPickleLimits(t *testing.T) {
	lim := defaultPickleLimits
	binunicode8 := func(n uint64) string {
		return "\x80\x04\x8d" + string(binary.LittleEndian.AppendUint64(nil, n))
	}
	tests := []struct {
		name   string
		pkl    string
		budget int64
		msg    string
	}{
		{"stack", "\x80\x02" + strings.Repeat("N", lim.stack+1) + ".", 0, "more than 1048576 values on the stack (the limit)"},
		{"marks", "\x80\x02" + strings.Repeat("(", lim.marks+1) + ".", 0, "more than 4096 marks open (the limit)"},
		{"memo", "\x80\x04N" + strings.Repeat("\x94", lim.memo+1) + ".", 0, "more than 1048576 memo entries (the limit)"},
		{"sparse memo", "\x80\x02N" + sparseMemo(lim.memo+1) + ".", 0, "more than 1048576 memo entries (the limit)"},
		{"str", binunicode8(uint64(lim.object)+1) + strings.Repeat("x", int(lim.object)+1) + ".", 0, "str of 16777217 bytes, more than the limit of 16777216"},
		{"global", "c" + strings.Repeat("m", lim.global+1) + "\nname\n.", 0, "global name of 1025 bytes, more than the limit of 1024"},
		{"stack global", "\x80\x04\x8c\x01m\x8d" + string(binary.LittleEndian.AppendUint64(nil, uint64(lim.global+1))) + strings.Repeat("n", lim.global+1) + "\x93.", 0, "global name of 1025 bytes, more than the limit of 1024"},
		{"text int", "I" + strings.Repeat("9", maxIntDigits+1) + "\n.", 0, "integer of 4301 digits, more than Python's limit of 4300"},
		{"text line", "F" + strings.Repeat("1", 1<<16+1) + "\n.", 0, "text line longer than 65536 bytes"},
		{"budget", "\x80\x02" + strings.Repeat("]", 1000) + ".", 10_000, "decoding needs more than 10000 bytes of memory (the test's budget)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			budget := tt.budget
			if budget == 0 {
				budget = 4 << 30
			}
			_, _, err := unpickle([]byte(tt.pkl), budget)
			require.ErrorIs(t, err, ErrTooLarge)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
	t.Run("at the limits", func(t *testing.T) {
		pkl := "\x80\x02" + strings.Repeat("(", lim.marks) + strings.Repeat("N", lim.stack-lim.marks) + "." +
			"I" + strings.Repeat("9", maxIntDigits) + "\n."
		_, u, err := unpickle([]byte(pkl), 4<<30)
		require.NoError(t, err)
		assert.Equal(t, lim.stack-lim.marks, u.maxStack)
		assert.Equal(t, lim.marks, u.maxMarks)
	})
}

// sparseMemo is n LONG_BINPUTs of indices far apart.
func sparseMemo(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteByte('r')
		binary.Write(&b, binary.LittleEndian, uint32(i)*4093+7)
	}
	return b.String()
}

// dictPickle is a dict of n keys, from key(i), set 1,000 at a time as Python's
// pickler does.
func dictPickle(n int, key func(b *bytes.Buffer, i int)) []byte {
	var b bytes.Buffer
	b.WriteString("\x80\x02}")
	for i := 0; i < n; i += 1000 {
		b.WriteByte('(')
		for j := i; j < min(n, i+1000); j++ {
			key(&b, j)
			b.WriteByte('N')
		}
		b.WriteByte('u')
	}
	b.WriteByte('.')
	return b.Bytes()
}

func intKey(b *bytes.Buffer, i int) {
	b.WriteByte('J')
	binary.Write(b, binary.LittleEndian, int32(i))
}

func strKey(b *bytes.Buffer, i int) {
	s := fmt.Sprintf("layer%d.block%d.conv.weight", i/1000, i%1000)
	b.WriteByte(0x8c)
	b.WriteByte(byte(len(s)))
	b.WriteString(s)
}

// TestUnpickleLinear reads pickles whose work would be quadratic if an opcode
// cost time in proportion to what came before it (a dict insert scanning every
// key, a key hashed in full at every insert, a shape converted at every use).
// The sizes make quadratic work take many minutes (a dict of 200,000 keys took
// 51 s before), while linear work takes well under a second; each read must end
// within a generous deadline. This bounds the test's time; it is not a speed
// assertion.
func TestUnpickleLinear(t *testing.T) {
	const deadline = 30 * time.Second
	longKey := strings.Repeat("k", 1<<20)
	var sameKey bytes.Buffer
	sameKey.WriteString("\x80\x04}\x8d")
	binary.Write(&sameKey, binary.LittleEndian, uint64(len(longKey)))
	sameKey.WriteString(longKey + "\x94" + "0")
	for i := range 200_000 {
		sameKey.WriteString("h\x00")
		intKey(&sameKey, i)
		sameKey.WriteString("s")
	}
	sameKey.WriteString(".")

	tests := []struct {
		name  string
		read  func() (any, error)
		check func(t *testing.T, v any, err error)
	}{
		{"dict of 400,000 int keys", func() (any, error) {
			v, _, err := unpickle(dictPickle(400_000, intKey), 4<<30)
			return v, err
		}, func(t *testing.T, v any, err error) {
			require.NoError(t, err)
			assert.Len(t, v.(*dict).keys, 400_000)
		}},
		{"dict of 400,000 str keys", func() (any, error) {
			v, _, err := unpickle(dictPickle(400_000, strKey), 4<<30)
			return v, err
		}, func(t *testing.T, v any, err error) {
			require.NoError(t, err)
			d := v.(*dict)
			assert.Len(t, d.keys, 400_000)
			_, ok := d.get("layer399.block999.conv.weight")
			assert.True(t, ok)
		}},
		{"a 1 MiB key set 200,000 times", func() (any, error) {
			v, _, err := unpickle(sameKey.Bytes(), 4<<30)
			return v, err
		}, func(t *testing.T, v any, err error) {
			require.NoError(t, err)
			d := v.(*dict)
			require.Len(t, d.keys, 1)
			assert.Equal(t, int64(199_999), d.vals[0])
		}},
		{"a file: dict of 200,000 int keys (1.2 MB)", func() (any, error) {
			return read(torchZip(t, dictPickle(200_000, intKey), "", nil))
		}, func(t *testing.T, v any, err error) {
			// It needs more memory than its size allows: refused, at once.
			require.ErrorIs(t, err, ErrTooLarge)
		}},
		{"a file: dict of 200,000 str keys (6 MB)", func() (any, error) {
			return read(torchZip(t, dictPickle(200_000, strKey), "", nil))
		}, func(t *testing.T, v any, err error) {
			require.NoError(t, err)
			assert.Empty(t, v, "a dict without tensors")
		}},
		{"a file: a shape of 100,000 ints used by 100,000 tensors", func() (any, error) {
			p := tensorPickle(1, []int{1}, []int{1})
			p.op("(" + strings.Repeat("K\x01", 100_000) + "t").put(2).op("0")
			p.op("ctorch._utils\n_rebuild_tensor_v2\n").put(3).op("0")
			p.op("((").str("storage").op("ctorch\nFloatStorage\n").str("0").str("cpu").int(1).op("tQK\x00").get(2).get(2).op("\x89)t").put(4).op("0")
			p.op("(")
			for i := range 100_000 {
				p.int(i).get(3).get(4).op("R")
			}
			p.op("u.")
			return read(torchZip(t, p.Bytes(), "little", map[string][]byte{"0": make([]byte, 4)}))
		}, func(t *testing.T, v any, err error) {
			require.ErrorIs(t, err, ErrTooLarge)
			assert.ErrorContains(t, err, "100000 dimensions, more than the limit of 64")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v any
			var err error
			done := make(chan struct{})
			start := time.Now()
			go func() {
				defer close(done)
				v, err = tt.read()
			}()
			select {
			case <-done:
			case <-time.After(deadline):
				t.Fatalf("still reading after %v: quadratic work?", deadline)
			}
			t.Logf("read in %v (wall clock)", time.Since(start).Round(time.Millisecond))
			tt.check(t, v, err)
		})
	}
}

// TestUnpicklerStandsAlone: the unpickler knows Python's types and nothing of
// torch. Without hooks a call of torch's rebuild function is an opaque object; a
// call hook decides what a global makes; and pickle.go uses no name that the
// torch files declare.
func TestUnpicklerStandsAlone(t *testing.T) {
	t.Run("no hooks", func(t *testing.T) {
		v, _, err := unpickle([]byte("\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(K\x01K\x00))tR."), 1<<20)
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
		u := newUnpickler(bufio.NewReader(strings.NewReader(pkl)), int64(len(pkl)), newBudget(1<<20, "test"), hooks)
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

// BenchmarkUnpickle measures the unpickler: pickle=resnet152 is the data.pkl of a
// torchvision ResNet-152 state dict with torch's hooks and flattening (the
// budget of its 241 MB file), the dicts are 200,000 keys set 1,000 at a time.
func BenchmarkUnpickle(b *testing.B) {
	r152, err := os.ReadFile(filepath.Join("testdata", "pickle-resnet152.pkl"))
	require.NoError(b, err)
	cases := []struct {
		name string
		pkl  []byte
		run  func(pkl []byte) error
	}{
		{"resnet152", r152, func(pkl []byte) error {
			mem := valueBudget(241_609_209)
			loader := newTorchLoader(241_609_209, mem)
			u := newUnpickler(bufio.NewReader(bytes.NewReader(pkl)), int64(len(pkl)), mem, loader.hooks())
			obj, err := u.load()
			if err != nil {
				return err
			}
			_, err = stateDictTensors(obj, mem)
			return err
		}},
		{"dict-200k-str", dictPickle(200_000, strKey), nil},
		{"dict-200k-int", dictPickle(200_000, intKey), nil},
	}
	for _, c := range cases {
		b.Run("pickle="+c.name, func(b *testing.B) {
			run := c.run
			if run == nil {
				run = func(pkl []byte) error { _, _, err := unpickle(pkl, 1<<30); return err }
			}
			b.SetBytes(int64(len(c.pkl)))
			b.ReportAllocs()
			for b.Loop() {
				if err := run(c.pkl); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
