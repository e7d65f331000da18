package checkpoint

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/big"
	"path"
	"sort"
	"strconv"
	"strings"
)

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

// maxCallDepth bounds nested _rebuild_from_type_v2 calls.
const maxCallDepth = 16

// call applies a pickled callable to args. Only what state dicts need is
// understood; other classes become opaque objects.
func call(f any, args tuple) (any, error) { return callDepth(f, args, 0) }

func callDepth(f any, args tuple, depth int) (any, error) {
	g, ok := f.(global)
	if !ok {
		return nil, fmt.Errorf("%w: bad pickle: call of %s", ErrCorrupt, typeName(f))
	}
	switch g.module + "." + g.name {
	case "collections.OrderedDict", "builtins.dict", "__builtin__.dict":
		return &dict{}, nil
	case "torch._utils._rebuild_tensor", "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor_v3":
		return rebuildTensor(g.name, args)
	case "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state":
		if len(args) < 1 {
			return nil, fmt.Errorf("%w: bad pickle: %s without arguments", ErrCorrupt, g.name)
		}
		return args[0], nil
	case "torch._tensor._rebuild_from_type_v2":
		if depth >= maxCallDepth || len(args) < 3 {
			return nil, fmt.Errorf("%w: bad pickle: %s with %d arguments at depth %d", ErrCorrupt, g.name, len(args), depth)
		}
		inner, ok := args[2].(tuple)
		if !ok {
			return nil, fmt.Errorf("%w: bad pickle: %s arguments are %s", ErrCorrupt, g.name, typeName(args[2]))
		}
		return callDepth(args[0], inner, depth+1)
	case "torch._utils._rebuild_qtensor", "torch._utils._rebuild_sparse_tensor",
		"torch._utils._rebuild_nested_tensor", "torch._utils._rebuild_meta_tensor_no_storage",
		"torch._utils._rebuild_wrapper_subclass", "torch._utils._rebuild_device_tensor_from_numpy",
		"torch._utils._rebuild_xla_tensor", "torch._utils._rebuild_mtia_tensor":
		return nil, fmt.Errorf("%w: %s tensors", ErrUnsupportedDType, strings.TrimPrefix(g.name, "_rebuild_"))
	}
	return &object{class: g, args: args}, nil
}

// rebuildTensor implements _rebuild_tensor(storage, offset, size, stride),
// _rebuild_tensor_v2 (plus requires_grad, hooks, metadata) and
// _rebuild_tensor_v3 (plus dtype).
func rebuildTensor(name string, args tuple) (any, error) {
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
	return &tensor{st: st, offset: off, shape: shape, stride: stride}, nil
}

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

// storageLoader answers torch's persistent IDs, ("storage", type, key, location,
// numel) in the zip format and the same plus view metadata in the legacy one,
// returning one *storage per key.
type storageLoader struct {
	byKey map[string]*storage
	// maxBytes bounds a storage's size: the input cannot hold more.
	maxBytes int64
}

func (l *storageLoader) load(pid any) (any, error) {
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
	n, ok := t[4].(int64)
	if !ok || n < 0 || n > l.maxBytes/int64(dt.Size()) {
		return nil, bad("storage %s has %s elements, more than the file holds", key, typeName(t[4]))
	}
	st, seen := l.byKey[key]
	if !seen {
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
		return &storage{key: key, dtype: dt, numel: size, root: st, off: off}, nil
	}
	return st, nil
}

// maxNodes bounds the values flatten visits: shared sub-tuples could otherwise
// make a small pickle describe an exponential number of paths.
const maxNodes = 1 << 20

// flatten collects the tensors of v under dotted names; *budget counts down the
// values it may still visit.
func flatten(v any, prefix string, out map[string]*tensor, depth int, budget *int) error {
	*budget--
	if *budget < 0 {
		return fmt.Errorf("%w: bad pickle: more than %d nested values", ErrCorrupt, maxNodes)
	}
	if depth > 16 {
		return nil
	}
	join := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	var items []any
	var names func(i int) string
	switch v := v.(type) {
	case *tensor:
		out[prefix] = v
		return nil
	case *dict:
		items = v.vals
		names = func(i int) string {
			switch k := v.keys[i].(type) {
			case string:
				return k
			case int64:
				return strconv.FormatInt(k, 10)
			}
			return ""
		}
	case *list:
		items = v.items
	case tuple:
		items = v
	}
	for i, x := range items {
		name := strconv.Itoa(i)
		if names != nil {
			if name = names(i); name == "" {
				continue
			}
		}
		if err := flatten(x, join(name), out, depth+1, budget); err != nil {
			return err
		}
	}
	return nil
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
// budget bounds the bytes of storages and of float32 results together, so that a
// small hostile file cannot claim a large allocation.
func planTorch(tensors map[string]*tensor, budget int64) ([]*storage, error) {
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
		total += 4 * n
		if total > budget {
			return nil, fmt.Errorf("%w: tensors need more than %d bytes, more than the file can hold", ErrCorrupt, budget)
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

// maxPickleBytes bounds the size of a zip's data.pkl.
const maxPickleBytes = 1 << 30

func readZip(r io.ReaderAt, size int64) (map[string]Tensor, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("%w: zip: %v", ErrCorrupt, err)
	}
	entries := make(map[string]*zip.File, len(zr.File))
	var pkl *zip.File
	for _, f := range zr.File {
		entries[f.Name] = f
		if path.Base(f.Name) == "data.pkl" && strings.Count(f.Name, "/") <= 1 {
			if pkl != nil {
				return nil, fmt.Errorf("%w: zip holds %s and %s", ErrCorrupt, pkl.Name, f.Name)
			}
			pkl = f
		}
	}
	if pkl == nil {
		return nil, fmt.Errorf("%w: a zip archive without data.pkl is not a PyTorch checkpoint", ErrUnknownFormat)
	}
	prefix := strings.TrimSuffix(pkl.Name, "data.pkl")
	bo := binary.ByteOrder(binary.LittleEndian)
	if f := entries[prefix+"byteorder"]; f != nil {
		b, err := readEntry(f, 16)
		if err != nil {
			return nil, err
		}
		switch strings.TrimSpace(string(b)) {
		case "little":
		case "big":
			bo = binary.BigEndian
		default:
			return nil, fmt.Errorf("%w: byteorder %q", ErrCorrupt, b)
		}
	}
	raw, err := readEntry(pkl, maxPickleBytes)
	if err != nil {
		return nil, err
	}
	loader := &storageLoader{byKey: make(map[string]*storage), maxBytes: size}
	u := newUnpickler(bufio.NewReader(bytes.NewReader(raw)), int64(len(raw)), loader.load)
	obj, err := u.load()
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, pkl.Name)
	}
	tensors := make(map[string]*tensor)
	budget := maxNodes
	if err := flatten(obj, "", tensors, 0, &budget); err != nil {
		return nil, err
	}
	roots, err := planTorch(tensors, 64*size)
	if err != nil {
		return nil, err
	}
	jobs := make([]readJob, 0, len(roots))
	for _, st := range roots {
		name := prefix + "data/" + st.key
		f := entries[name]
		if f == nil {
			return nil, fmt.Errorf("%w: storage %s missing from the archive", ErrCorrupt, name)
		}
		if f.UncompressedSize64 < uint64(len(st.data)) {
			return nil, fmt.Errorf("%w: %s holds %d bytes, want %d", ErrCorrupt, name, f.UncompressedSize64, len(st.data))
		}
		j := readJob{name: name, dst: st.data}
		full := f.UncompressedSize64 == uint64(len(st.data))
		if f.Method == zip.Store && f.Flags&0x1 == 0 {
			off, err := f.DataOffset()
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err)
			}
			if f.CompressedSize64 != f.UncompressedSize64 || off < 0 || int64(len(st.data)) > size-off {
				return nil, fmt.Errorf("%w: %s: %d bytes at offset %d run past the end of a %d-byte file", ErrCorrupt, name, len(st.data), off, size)
			}
			j.off, j.crc, j.checkCRC = off, f.CRC32, full && f.CRC32 != 0
		} else {
			j.open = f.Open
		}
		jobs = append(jobs, j)
	}
	if err := readAll(r, jobs); err != nil {
		return nil, err
	}
	return finishTorch(tensors, bo), nil
}

// readEntry reads a whole zip entry of at most limit bytes.
func readEntry(f *zip.File, limit int64) ([]byte, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, f.Name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, f.Name, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrCorrupt, f.Name, limit)
	}
	return b, nil
}

// legacyMagic is torch.serialization.MAGIC_NUMBER, the first pickle of a legacy file.
var legacyMagic, _ = new(big.Int).SetString("1950a86a20f9469cfc6c", 16)

func readLegacy(r io.ReaderAt, size int64) (map[string]Tensor, error) {
	br := bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 1<<16)
	left := size
	next := func(what string, persist persistentLoader) (any, error) {
		u := newUnpickler(br, left, persist)
		v, err := u.load()
		left = u.limit
		if err != nil {
			return nil, fmt.Errorf("%w (in the %s pickle)", err, what)
		}
		return v, nil
	}
	magic, err := next("magic number", nil)
	if err != nil {
		return nil, err
	}
	if m, ok := magic.(*big.Int); !ok || m.Cmp(legacyMagic) != 0 {
		return nil, fmt.Errorf("%w: a pickle without torch's magic number (%s)", ErrUnknownFormat, typeName(magic))
	}
	proto, err := next("protocol", nil)
	if err != nil {
		return nil, err
	}
	if p, ok := proto.(int64); !ok || p != 1001 {
		return nil, fmt.Errorf("%w: legacy protocol %v, want 1001", ErrCorrupt, proto)
	}
	info, err := next("sys_info", nil)
	if err != nil {
		return nil, err
	}
	bo := binary.ByteOrder(binary.LittleEndian)
	if d, ok := info.(*dict); ok {
		if le, ok := d.get("little_endian"); ok && le == false {
			bo = binary.BigEndian
		}
	}
	loader := &storageLoader{byKey: make(map[string]*storage), maxBytes: size}
	obj, err := next("data", loader.load)
	if err != nil {
		return nil, err
	}
	keysObj, err := next("storage keys", nil)
	if err != nil {
		return nil, err
	}
	keys, ok := keysObj.(*list)
	if !ok {
		return nil, fmt.Errorf("%w: storage keys are %s, want a list", ErrCorrupt, typeName(keysObj))
	}
	tensors := make(map[string]*tensor)
	budget := maxNodes
	if err := flatten(obj, "", tensors, 0, &budget); err != nil {
		return nil, err
	}
	roots, err := planTorch(tensors, 8*size)
	if err != nil {
		return nil, err
	}
	wanted := make(map[*storage]bool, len(roots))
	for _, st := range roots {
		wanted[st] = true
	}
	// The storages follow in key order, each as an int64 element count and its bytes.
	pos := size - left
	jobs := make([]readJob, 0, len(roots))
	for _, k := range keys.items {
		key, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("%w: storage key is %s", ErrCorrupt, typeName(k))
		}
		st := loader.byKey[key]
		if st == nil {
			return nil, fmt.Errorf("%w: storage %s is listed but never used", ErrCorrupt, key)
		}
		var hdr [8]byte
		if pos > size-8 {
			return nil, fmt.Errorf("%w: storage %s: file ends at %d", ErrCorrupt, key, size)
		}
		if _, err := r.ReadAt(hdr[:], pos); err != nil {
			return nil, fmt.Errorf("%w: storage %s: %v", ErrCorrupt, key, err)
		}
		n := int64(bo.Uint64(hdr[:]))
		if n != st.numel {
			return nil, fmt.Errorf("%w: storage %s has %d elements in the file, want %d", ErrCorrupt, key, n, st.numel)
		}
		pos += 8
		nbytes := n * int64(st.dtype.Size())
		if nbytes > size-pos {
			return nil, fmt.Errorf("%w: storage %s: %d bytes at offset %d run past the end of a %d-byte file", ErrCorrupt, key, nbytes, pos, size)
		}
		if wanted[st] {
			jobs = append(jobs, readJob{name: "storage " + key, off: pos, dst: st.data})
			delete(wanted, st)
		}
		pos += nbytes
	}
	for st := range wanted {
		return nil, fmt.Errorf("%w: storage %s missing from the file", ErrCorrupt, st.key)
	}
	if err := readAll(r, jobs); err != nil {
		return nil, err
	}
	return finishTorch(tensors, bo), nil
}
