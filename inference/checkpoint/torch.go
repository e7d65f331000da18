package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// This file knows what torch.save pickles: the hooks that give the unpickler
// torch's storages and tensors, the state dict's tensors under dotted names, and
// the plan for reading their storages. torchzip.go and torchlegacy.go read the
// two file formats with it.

// storage is a torch storage named in a persistent ID; its bytes are read later.
type storage struct {
	key   string
	dtype DType
	numel int64 // elements
	// root and off make a legacy storage view: elements off.. of root.
	root *storage
	off  int64
	data []byte // raw bytes once read
}

// tensor is a view of a storage, as torch's _rebuild_tensor_v2 describes it.
type tensor struct {
	st     *storage
	offset int64 // elements
	shape  []int64
	stride []int64
	// out is the final data when the storage was read straight into it.
	out []float32
}

func (*storage) pickleName() string { return "storage" }
func (*tensor) pickleName() string  { return "tensor" }

// storageTypes maps torch's storage classes to dtypes.
var storageTypes = map[string]DType{
	"FloatStorage": F32, "DoubleStorage": F64, "HalfStorage": F16, "BFloat16Storage": BF16,
	"LongStorage": I64, "IntStorage": I32, "ShortStorage": I16, "CharStorage": I8,
	"ByteStorage": U8, "BoolStorage": Bool, "UntypedStorage": U8,
}

// torchDTypes maps torch dtype globals (torch.float32) to dtypes.
var torchDTypes = map[string]DType{
	"float32": F32, "float": F32, "float64": F64, "double": F64, "float16": F16, "half": F16,
	"bfloat16": BF16, "int64": I64, "long": I64, "int32": I32, "int": I32, "int16": I16,
	"short": I16, "int8": I8, "uint8": U8, "bool": Bool,
}

// Limits on what a torch.save pickle describes.
const (
	// maxCallDepth bounds nested _rebuild_from_type_v2 calls.
	maxCallDepth = 16
	// maxDims bounds a tensor's dimensions; state dicts hold tensors of at most
	// five (3-D convolutions).
	maxDims = 64
	// maxStorageKey bounds a storage key: torch.save writes decimal numbers.
	maxStorageKey = 64
	// maxNodes bounds the values flatten visits: shared sub-dicts could
	// otherwise make a small pickle describe an exponential number of paths.
	maxNodes = 1 << 20
	// maxNesting is how deep flatten looks for tensors; deeper ones are ignored.
	maxNesting = 16
	// tensorFactor bounds the bytes of storages and float32 tensors together, as
	// a multiple of the file's size. A file of float32 tensors needs 2 (its
	// storages are read into the tensors), one of float16 3, one of uint8 5.
	tensorFactor = 8
)

// valueBudget is the memory that decoding the pickles of a file of size bytes
// may take (see budget). A state dict's pickle is a small part of its file and
// needs less than the file's size; the factor leaves room for pickles that are
// mostly small values, such as a dict of 200,000 ints.
func valueBudget(size int64) *budget {
	return newBudget(16*size+1<<20, fmt.Sprintf("the limit for a %d-byte file is 16 times its size plus 1 MiB", size))
}

// torchLoader gives the unpickler what torch.save's pickles refer to: storages
// for persistent IDs, tensors for torch's rebuild functions. It charges what it
// makes to the unpickler's budget.
type torchLoader struct {
	byKey map[string]*storage
	// maxBytes bounds a storage's size: the input cannot hold more.
	maxBytes int64
	mem      *budget
}

func newTorchLoader(maxBytes int64, mem *budget) *torchLoader {
	return &torchLoader{byKey: make(map[string]*storage), maxBytes: maxBytes, mem: mem}
}

func (l *torchLoader) hooks() pickleHooks {
	return pickleHooks{persistent: l.persistent, call: l.call}
}

// call applies a pickled global to args. Torch's tensor rebuild functions make
// tensors; other calls are left to callBuiltin.
func (l *torchLoader) call(g global, args tuple) (any, error) { return l.callDepth(g, args, 0) }

func (l *torchLoader) callDepth(g global, args tuple, depth int) (any, error) {
	switch g.module {
	case "torch._utils":
		switch g.name {
		case "_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3":
			return l.rebuildTensor(g.name, args)
		case "_rebuild_parameter", "_rebuild_parameter_with_state":
			if len(args) < 1 {
				return nil, fmt.Errorf("%w: bad pickle: %s without arguments", ErrCorrupt, g.name)
			}
			return args[0], nil
		case "_rebuild_qtensor", "_rebuild_sparse_tensor", "_rebuild_nested_tensor",
			"_rebuild_meta_tensor_no_storage", "_rebuild_wrapper_subclass",
			"_rebuild_device_tensor_from_numpy", "_rebuild_xla_tensor", "_rebuild_mtia_tensor":
			return nil, fmt.Errorf("%w: %s tensors", ErrUnsupportedDType, strings.TrimPrefix(g.name, "_rebuild_"))
		}
	case "torch._tensor":
		if g.name == "_rebuild_from_type_v2" {
			if depth >= maxCallDepth || len(args) < 3 {
				return nil, fmt.Errorf("%w: bad pickle: %s with %d arguments at depth %d", ErrCorrupt, g.name, len(args), depth)
			}
			f, ok := args[0].(global)
			if !ok {
				return nil, fmt.Errorf("%w: bad pickle: call of %s", ErrCorrupt, typeName(args[0]))
			}
			inner, ok := args[2].(tuple)
			if !ok {
				return nil, fmt.Errorf("%w: bad pickle: %s arguments are %s", ErrCorrupt, g.name, typeName(args[2]))
			}
			return l.callDepth(f, inner, depth+1)
		}
	}
	return callBuiltin(g, args)
}

// rebuildTensor implements _rebuild_tensor(storage, offset, size, stride),
// _rebuild_tensor_v2 (plus requires_grad, hooks, metadata) and
// _rebuild_tensor_v3 (plus dtype).
func (l *torchLoader) rebuildTensor(name string, args tuple) (any, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: bad pickle: %s: %s", ErrCorrupt, name, fmt.Sprintf(format, a...))
	}
	if len(args) < 4 {
		return nil, bad("%d arguments, want at least 4", len(args))
	}
	st, ok := args[0].(*storage)
	if !ok {
		return nil, bad("storage is %s", typeName(args[0]))
	}
	off, ok := args[1].(int64)
	if !ok || off < 0 {
		return nil, bad("storage offset is %s", typeName(args[1]))
	}
	for _, a := range args[2:4] {
		if t, ok := a.(tuple); ok && len(t) > maxDims {
			return nil, fmt.Errorf("%w: %s: %d dimensions, more than the limit of %d", ErrTooLarge, name, len(t), maxDims)
		}
	}
	shape, err := intTuple(args[2])
	if err != nil {
		return nil, bad("size: %v", err)
	}
	stride, err := intTuple(args[3])
	if err != nil {
		return nil, bad("stride: %v", err)
	}
	if len(shape) != len(stride) {
		return nil, bad("size %v and stride %v differ in length", shape, stride)
	}
	if name == "_rebuild_tensor_v3" && len(args) >= 7 {
		if g, ok := args[6].(global); ok {
			dt, ok := torchDTypes[g.name]
			if !ok || g.module != "torch" {
				return nil, fmt.Errorf("%w: %s.%s", ErrUnsupportedDType, g.module, g.name)
			}
			if dt != st.dtype {
				return nil, fmt.Errorf("%w: %s tensor on a %s storage", ErrUnsupportedDType, dt, st.dtype)
			}
		}
	}
	if err := l.mem.charge(objectCost + 16*int64(len(shape))); err != nil {
		return nil, err
	}
	return &tensor{st: st, offset: off, shape: shape, stride: stride}, nil
}

// intTuple converts a tuple of non-negative ints.
func intTuple(v any) ([]int64, error) {
	t, ok := v.(tuple)
	if !ok {
		return nil, fmt.Errorf("%s, want a tuple", typeName(v))
	}
	out := make([]int64, len(t))
	for i, x := range t {
		n, ok := x.(int64)
		if !ok || n < 0 {
			return nil, fmt.Errorf("element %d is %s, want a non-negative int", i, typeName(x))
		}
		out[i] = n
	}
	return out, nil
}

// persistent answers torch's persistent IDs, ("storage", type, key, location,
// numel) in the zip format and the same plus view metadata in the legacy one,
// returning one *storage per key.
func (l *torchLoader) persistent(pid any) (any, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: bad pickle: persistent ID: %s", ErrCorrupt, fmt.Sprintf(format, a...))
	}
	t, ok := pid.(tuple)
	if !ok || len(t) < 5 {
		return nil, bad("%s, want a tuple of 5 or 6", typeName(pid))
	}
	if s, ok := t[0].(string); !ok || s != "storage" {
		return nil, bad("kind %s, want \"storage\"", typeName(t[0]))
	}
	g, ok := t[1].(global)
	if !ok {
		return nil, bad("storage type is %s", typeName(t[1]))
	}
	dt, ok := storageTypes[g.name]
	if !ok || (g.module != "torch" && g.module != "torch.storage") {
		return nil, fmt.Errorf("%w: storage type %s.%s", ErrUnsupportedDType, g.module, g.name)
	}
	key, ok := t[2].(string)
	if !ok {
		k, isInt := t[2].(int64)
		if !isInt {
			return nil, bad("key is %s", typeName(t[2]))
		}
		key = strconv.FormatInt(k, 10)
	}
	if len(key) > maxStorageKey {
		return nil, bad("storage key of %d bytes, more than the limit of %d", len(key), maxStorageKey)
	}
	n, ok := t[4].(int64)
	if !ok || n < 0 || n > l.maxBytes/int64(dt.Size()) {
		return nil, bad("storage %s has %v elements, more than the file holds", key, t[4])
	}
	st, seen := l.byKey[key]
	if !seen {
		if err := l.mem.charge(objectCost + entryCost + int64(len(key))); err != nil {
			return nil, err
		}
		st = &storage{key: key, dtype: dt, numel: n}
		l.byKey[key] = st
	} else if st.dtype != dt {
		return nil, bad("storage %s is both %s and %s", key, st.dtype, dt)
	}
	if len(t) >= 6 && t[5] != nil {
		// Legacy view: (view_key, offset, view_size) in elements of the root.
		v, ok := t[5].(tuple)
		if !ok || len(v) != 3 {
			return nil, bad("view metadata is %s", typeName(t[5]))
		}
		off, ok1 := v[1].(int64)
		size, ok2 := v[2].(int64)
		if !ok1 || !ok2 || off < 0 || size < 0 || off > st.numel || size > st.numel-off {
			return nil, bad("view of storage %s out of range", key)
		}
		if err := l.mem.charge(objectCost); err != nil {
			return nil, err
		}
		return &storage{key: key, dtype: dt, numel: size, root: st, off: off}, nil
	}
	return st, nil
}

// torchTensors names the tensors of the unpickled state dict obj
// (stateDictTensors) and returns the storages to read for them (planTorch),
// the steps both PyTorch formats share.
func torchTensors(obj any, mem *budget, size int64) (map[string]*tensor, []*storage, error) {
	tensors, err := stateDictTensors(obj, mem)
	if err != nil {
		return nil, nil, err
	}
	roots, err := planTorch(tensors, size)
	if err != nil {
		return nil, nil, err
	}
	return tensors, roots, nil
}

// stateDictTensors names the tensors of a pickled state dict: obj must be a dict (an
// OrderedDict from model.state_dict(), or a checkpoint dict holding one). Nested
// dicts, lists and tuples are flattened with dots, up to maxNesting levels; names
// are charged to mem.
func stateDictTensors(obj any, mem *budget) (map[string]*tensor, error) {
	if _, ok := obj.(*dict); !ok {
		return nil, fmt.Errorf("%w: the pickle holds %s, want a dict of tensors such as model.state_dict()", ErrNotStateDict, typeName(obj))
	}
	f := flattener{out: make(map[string]*tensor), mem: mem}
	if err := f.visit(obj); err != nil {
		return nil, err
	}
	return f.out, nil
}

// flattener walks a state dict. It builds a dotted name only for a tensor, from
// path, so visiting a value costs O(1) and a name is paid for once.
type flattener struct {
	out   map[string]*tensor
	path  []string
	nodes int
	mem   *budget
}

func (f *flattener) visit(v any) error {
	f.nodes++
	if f.nodes > maxNodes {
		return fmt.Errorf("%w: the pickle's values reach more than %d values (the limit) through shared containers", ErrTooLarge, maxNodes)
	}
	if len(f.path) > maxNesting {
		return nil
	}
	switch v := v.(type) {
	case *tensor:
		n := len(f.path)
		for _, p := range f.path {
			n += len(p)
		}
		if err := f.mem.charge(int64(n) + entryCost); err != nil {
			return err
		}
		f.out[strings.Join(f.path, ".")] = v
	case *dict:
		for i, k := range v.keys {
			var name string
			switch k := k.(type) {
			case string:
				name = k
			case int64:
				name = strconv.FormatInt(k, 10)
			default:
				continue
			}
			if err := f.enter(name, v.vals[i]); err != nil {
				return err
			}
		}
	case *list:
		return f.items(v.items)
	case tuple:
		return f.items(v)
	}
	return nil
}

func (f *flattener) items(items []any) error {
	for i, x := range items {
		if err := f.enter(strconv.Itoa(i), x); err != nil {
			return err
		}
	}
	return nil
}

func (f *flattener) enter(name string, v any) error {
	f.path = append(f.path, name)
	err := f.visit(v)
	f.path = f.path[:len(f.path)-1]
	return err
}

// root returns the storage that owns the bytes and the element offset into it.
func (t *tensor) root() (*storage, int64) {
	if t.st.root != nil {
		return t.st.root, t.st.off + t.offset
	}
	return t.st, t.offset
}

// check verifies that t lies inside its storage and returns its element count and
// whether it is one contiguous row-major run.
func (t *tensor) check() (n int64, contiguous bool, err error) {
	n, err = numel(t.shape, math.MaxInt32*4)
	if err != nil {
		return 0, false, err
	}
	if n == 0 {
		return 0, true, nil
	}
	if t.offset > t.st.numel {
		return 0, false, fmt.Errorf("offset %d beyond a storage of %d elements", t.offset, t.st.numel)
	}
	last := t.offset
	want := int64(1)
	contiguous = true
	for i := len(t.shape) - 1; i >= 0; i-- {
		d, s := t.shape[i], t.stride[i]
		if d == 1 {
			continue
		}
		if s == 0 {
			return 0, false, fmt.Errorf("stride 0 in %v: overlapping views are not supported", t.stride)
		}
		if s > t.st.numel || (d-1) > (t.st.numel-last)/s {
			return 0, false, fmt.Errorf("size %v, stride %v and offset %d exceed a storage of %d elements", t.shape, t.stride, t.offset, t.st.numel)
		}
		last += (d - 1) * s
		if s != want {
			contiguous = false
		}
		want *= d
	}
	if last >= t.st.numel || n > t.st.numel {
		return 0, false, fmt.Errorf("size %v, stride %v and offset %d exceed a storage of %d elements", t.shape, t.stride, t.offset, t.st.numel)
	}
	return n, contiguous, nil
}

// planTorch checks every tensor, decides which storages can be read straight into
// their tensor's final slice, and returns the storages to read.
//
// The bytes of the storages and of the float32 results, with each name's shape,
// must stay within tensorFactor times size, the file's size, so that a small
// hostile file cannot claim a large allocation (such as one storage under many
// names, or a deflated storage of zeros).
func planTorch(tensors map[string]*tensor, size int64) ([]*storage, error) {
	limit := tensorFactor * size
	uses := make(map[*storage]int)
	var total int64
	for name, t := range tensors {
		n, _, err := t.check()
		if err != nil {
			return nil, fmt.Errorf("%w: tensor %s: %v", ErrCorrupt, name, err)
		}
		st, _ := t.root()
		if uses[st] == 0 {
			total += st.numel * int64(st.dtype.Size())
		}
		uses[st]++
		total += 4*n + 8*int64(len(t.shape)) + objectCost
		if total > limit {
			return nil, fmt.Errorf("%w: tensors need more than %d bytes (the limit for a %d-byte file is %d times its size)", ErrTooLarge, limit, size, tensorFactor)
		}
	}
	var roots []*storage
	for st := range uses {
		roots = append(roots, st)
	}
	sort.Slice(roots, func(i, j int) bool { return roots[i].numel > roots[j].numel })
	for _, t := range tensors {
		st, off := t.root()
		n, contiguous, _ := t.check()
		if uses[st] == 1 && st.dtype == F32 && contiguous && off == 0 && n == st.numel && n > 0 {
			t.out = make([]float32, n)
			st.data = float32Bytes(t.out)
		}
	}
	for _, st := range roots {
		if st.data == nil {
			st.data = make([]byte, st.numel*int64(st.dtype.Size()))
		}
	}
	return roots, nil
}

// finishTorch converts the read storages into Tensors.
func finishTorch(tensors map[string]*tensor, bo binary.ByteOrder) map[string]Tensor {
	out := make(map[string]Tensor, len(tensors))
	for name, t := range tensors {
		st, off := t.root()
		n, contiguous, _ := t.check()
		res := Tensor{Shape: intShape(t.shape), DType: st.dtype}
		switch {
		case n == 0: // any offset is valid for an empty tensor: read nothing
			res.Data = []float32{}
		case t.out != nil && (bo == binary.LittleEndian && hostLittleEndian):
			res.Data = t.out
		case contiguous:
			res.Data = make([]float32, n)
			es := int64(st.dtype.Size())
			convert(res.Data, st.data[off*es:(off+n)*es], st.dtype, bo)
		default:
			res.Data = gather(t, st, off, n, bo)
		}
		out[name] = res
	}
	return out
}

// gather copies a strided view element by element.
func gather(t *tensor, st *storage, off, n int64, bo binary.ByteOrder) []float32 {
	out := make([]float32, n)
	es := int64(st.dtype.Size())
	idx := make([]int64, len(t.shape))
	for i := range out {
		pos := off
		for d := range idx {
			pos += idx[d] * t.stride[d]
		}
		convert(out[i:i+1], st.data[pos*es:(pos+1)*es], st.dtype, bo)
		for d := len(idx) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < t.shape[d] {
				break
			}
			idx[d] = 0
		}
	}
	return out
}
