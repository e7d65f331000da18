package checkpoint

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// This file is a small unpickler for what pickle writers emit in protocols 0 to 5
// (minus extension codes and out-of-band buffers). It never runs code, and it knows
// Python's built-in types only: what a persistent ID refers to and what calling a
// global makes are hooks its user passes (torch.go's for torch.save files). Without
// a hook, a call makes an opaque *object.

// pickle values: nil (None), bool, int64, *big.Int, float64, string, []byte,
// tuple, *list, *dict, *set, global, *object, and what the hooks return.
type (
	tuple []any
	list  struct{ items []any }
	set   struct{ items []any }
	// dict keeps insertion order; keys are compared with ==, so only hashable
	// Go values (strings, numbers, globals) are usable keys.
	dict struct {
		keys []any
		vals []any
	}
	global struct{ module, name string }
	// object is an instance of a class the unpickler's hooks do not know.
	object struct {
		class global
		args  tuple
		state any
	}
)

func (d *dict) set(k, v any) {
	if !hashable(k) {
		return // unhashable keys cannot occur in Python dicts either
	}
	for i, key := range d.keys {
		if key == k {
			d.vals[i] = v
			return
		}
	}
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
}

func (d *dict) get(k string) (any, bool) {
	for i, key := range d.keys {
		if s, ok := key.(string); ok && s == k {
			return d.vals[i], true
		}
	}
	return nil, false
}

func hashable(k any) bool {
	switch k.(type) {
	case nil, bool, int64, float64, string, global:
		return true
	}
	return false
}

// persistentFunc turns a persistent ID into a value (torch: a storage).
type persistentFunc func(pid any) (any, error)

// callFunc applies a global to arguments: REDUCE, NEWOBJ, NEWOBJ_EX, INST and OBJ
// call it. A hook handles the classes it knows and passes the others to
// callBuiltin.
type callFunc func(callable global, args tuple) (any, error)

// callBuiltin understands Python's dict types (collections.OrderedDict and
// dict: an empty dict, filled by SETITEMS) and makes every other call an opaque
// *object.
func callBuiltin(g global, args tuple) (any, error) {
	switch {
	case g.module == "collections" && g.name == "OrderedDict",
		(g.module == "builtins" || g.module == "__builtin__") && g.name == "dict":
		return &dict{}, nil
	}
	return &object{class: g, args: args}, nil
}

// pickleHooks are what the unpickler's user knows and it does not.
type pickleHooks struct {
	persistent persistentFunc // nil: a persistent ID is an error
	call       callFunc       // nil: callBuiltin
}

// unpickler reads one pickle from r. limit bounds any length read from the
// stream, so a corrupt length cannot make it allocate more than the input holds.
type unpickler struct {
	r     *bufio.Reader
	limit int64 // bytes left in the input
	hooks pickleHooks
	stack []any
	marks []int
	memo  map[uint32]any
	ops   int
}

// maxPickleOps bounds the work one pickle may cause.
const maxPickleOps = 1 << 26

var errStop = errors.New("stop")

func newUnpickler(r *bufio.Reader, limit int64, hooks pickleHooks) *unpickler {
	return &unpickler{r: r, limit: limit, memo: make(map[uint32]any), hooks: hooks}
}

func (u *unpickler) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: bad pickle: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

func (u *unpickler) readByte() (byte, error) {
	if u.limit <= 0 {
		return 0, u.errorf("unexpected end of data")
	}
	b, err := u.r.ReadByte()
	if err != nil {
		return 0, u.errorf("unexpected end of data")
	}
	u.limit--
	return b, nil
}

func (u *unpickler) read(n int64) ([]byte, error) {
	if n < 0 || n > u.limit {
		return nil, u.errorf("unexpected end of data: length %d exceeds the %d bytes left", n, u.limit)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(u.r, b); err != nil {
		return nil, u.errorf("unexpected end of data")
	}
	u.limit -= n
	return b, nil
}

func (u *unpickler) readUint(n int) (uint64, error) {
	b, err := u.read(int64(n))
	if err != nil {
		return 0, err
	}
	var v uint64
	for i := n - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v, nil
}

func (u *unpickler) readLine() (string, error) {
	var sb strings.Builder
	for {
		b, err := u.readByte()
		if err != nil {
			return "", err
		}
		if b == '\n' {
			return strings.TrimSuffix(sb.String(), "\r"), nil
		}
		if sb.Len() > 1<<16 {
			return "", u.errorf("line longer than 64 KiB")
		}
		sb.WriteByte(b)
	}
}

func (u *unpickler) push(v any) { u.stack = append(u.stack, v) }

func (u *unpickler) pop() (any, error) {
	n := len(u.stack)
	if n == 0 || (len(u.marks) > 0 && u.marks[len(u.marks)-1] == n) {
		return nil, u.errorf("stack underflow")
	}
	v := u.stack[n-1]
	u.stack = u.stack[:n-1]
	return v, nil
}

func (u *unpickler) top() (any, error) {
	n := len(u.stack)
	if n == 0 || (len(u.marks) > 0 && u.marks[len(u.marks)-1] == n) {
		return nil, u.errorf("stack underflow")
	}
	return u.stack[n-1], nil
}

// popMark returns the items above the last mark and removes them and the mark.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, u.errorf("no mark on the stack")
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	items := append([]any(nil), u.stack[m:]...)
	u.stack = u.stack[:m]
	return items, nil
}

func (u *unpickler) popN(n int) ([]any, error) {
	floor := 0
	if len(u.marks) > 0 {
		floor = u.marks[len(u.marks)-1]
	}
	if len(u.stack)-floor < n {
		return nil, u.errorf("stack underflow")
	}
	items := append([]any(nil), u.stack[len(u.stack)-n:]...)
	u.stack = u.stack[:len(u.stack)-n]
	return items, nil
}

func (u *unpickler) memoGet(i uint64) error {
	v, ok := u.memo[uint32(i)]
	if !ok || i > math.MaxUint32 {
		return u.errorf("memo key %d not found", i)
	}
	u.push(v)
	return nil
}

func (u *unpickler) memoPut(i uint64) error {
	if i > math.MaxUint32 {
		return u.errorf("memo key %d too large", i)
	}
	v, err := u.top()
	if err != nil {
		return err
	}
	u.memo[uint32(i)] = v
	return nil
}

// load runs the pickle to its STOP opcode and returns the value left.
func (u *unpickler) load() (any, error) {
	for {
		u.ops++
		if u.ops > maxPickleOps {
			return nil, u.errorf("more than %d opcodes", maxPickleOps)
		}
		op, err := u.readByte()
		if err != nil {
			return nil, err
		}
		if err := u.step(op); err != nil {
			if err == errStop {
				return u.pop()
			}
			return nil, err
		}
	}
}

func (u *unpickler) step(op byte) error {
	switch op {
	case 0x80: // PROTO
		p, err := u.readByte()
		if err != nil {
			return err
		}
		if p > 5 {
			return u.errorf("unsupported protocol %d", p)
		}
	case 0x95: // FRAME: the frame length is only a hint
		_, err := u.readUint(8)
		return err
	case '.': // STOP
		return errStop
	case '(': // MARK
		u.marks = append(u.marks, len(u.stack))
	case '0': // POP
		if len(u.marks) > 0 && u.marks[len(u.marks)-1] == len(u.stack) {
			u.marks = u.marks[:len(u.marks)-1]
			return nil
		}
		_, err := u.pop()
		return err
	case '1': // POP_MARK
		_, err := u.popMark()
		return err
	case '2': // DUP
		v, err := u.top()
		if err != nil {
			return err
		}
		u.push(v)
	case 'N':
		u.push(nil)
	case 0x88:
		u.push(true)
	case 0x89:
		u.push(false)
	case 'K': // BININT1
		v, err := u.readUint(1)
		u.push(int64(v))
		return err
	case 'M': // BININT2
		v, err := u.readUint(2)
		u.push(int64(v))
		return err
	case 'J': // BININT
		v, err := u.readUint(4)
		u.push(int64(int32(uint32(v))))
		return err
	case 0x8a, 0x8b: // LONG1, LONG4
		size := 1
		if op == 0x8b {
			size = 4
		}
		n, err := u.readUint(size)
		if err != nil {
			return err
		}
		b, err := u.read(int64(n))
		if err != nil {
			return err
		}
		u.push(decodeLong(b))
	case 'I', 'L': // INT, LONG (text)
		line, err := u.readLine()
		if err != nil {
			return err
		}
		line = strings.TrimSuffix(line, "L")
		switch line {
		case "00":
			u.push(false)
			return nil
		case "01":
			u.push(true)
			return nil
		}
		if v, err := strconv.ParseInt(line, 10, 64); err == nil {
			u.push(v)
			return nil
		}
		bi, ok := new(big.Int).SetString(line, 10)
		if !ok {
			return u.errorf("bad integer %q", line)
		}
		u.push(bi)
	case 'G': // BINFLOAT, big-endian
		b, err := u.read(8)
		if err != nil {
			return err
		}
		u.push(math.Float64frombits(binary.BigEndian.Uint64(b)))
	case 'F': // FLOAT (text)
		line, err := u.readLine()
		if err != nil {
			return err
		}
		v, err := strconv.ParseFloat(line, 64)
		if err != nil {
			return u.errorf("bad float %q", line)
		}
		u.push(v)
	case 'X', 0x8c, 0x8d: // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
		n, err := u.readUint(lengthSize(op))
		if err != nil {
			return err
		}
		if n > math.MaxInt64 {
			return u.errorf("string length %d", n)
		}
		b, err := u.read(int64(n))
		if err != nil {
			return err
		}
		u.push(string(b))
	case 'V': // UNICODE (raw-unicode-escape text; ASCII is all torch needs)
		line, err := u.readLine()
		u.push(line)
		return err
	case 'T', 'U': // BINSTRING, SHORT_BINSTRING (Python 2 str)
		size := 4
		if op == 'U' {
			size = 1
		}
		n, err := u.readUint(size)
		if err != nil {
			return err
		}
		b, err := u.read(int64(n))
		if err != nil {
			return err
		}
		u.push(string(b))
	case 'S': // STRING (quoted text)
		line, err := u.readLine()
		if err != nil {
			return err
		}
		if len(line) < 2 || (line[0] != '\'' && line[0] != '"') || line[len(line)-1] != line[0] {
			return u.errorf("bad STRING %q", line)
		}
		u.push(line[1 : len(line)-1])
	case 'B', 'C', 0x8e, 0x96: // BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8
		n, err := u.readUint(lengthSize(op))
		if err != nil {
			return err
		}
		if n > math.MaxInt64 {
			return u.errorf("bytes length %d", n)
		}
		b, err := u.read(int64(n))
		if err != nil {
			return err
		}
		u.push(b)
	case ')':
		u.push(tuple{})
	case 0x85, 0x86, 0x87: // TUPLE1, TUPLE2, TUPLE3
		items, err := u.popN(int(op-0x85) + 1)
		if err != nil {
			return err
		}
		u.push(tuple(items))
	case 't': // TUPLE
		items, err := u.popMark()
		if err != nil {
			return err
		}
		u.push(tuple(items))
	case ']':
		u.push(&list{})
	case 'l': // LIST
		items, err := u.popMark()
		if err != nil {
			return err
		}
		u.push(&list{items: items})
	case 'a': // APPEND
		v, err := u.pop()
		if err != nil {
			return err
		}
		return u.appendTo([]any{v})
	case 'e': // APPENDS
		items, err := u.popMark()
		if err != nil {
			return err
		}
		return u.appendTo(items)
	case '}':
		u.push(&dict{})
	case 'd': // DICT
		items, err := u.popMark()
		if err != nil {
			return err
		}
		d := &dict{}
		if err := u.setItems(d, items); err != nil {
			return err
		}
		u.push(d)
	case 's': // SETITEM
		kv, err := u.popN(2)
		if err != nil {
			return err
		}
		return u.setItemsOnTop(kv)
	case 'u': // SETITEMS
		items, err := u.popMark()
		if err != nil {
			return err
		}
		return u.setItemsOnTop(items)
	case 0x8f: // EMPTY_SET
		u.push(&set{})
	case 0x90: // ADDITEMS
		items, err := u.popMark()
		if err != nil {
			return err
		}
		t, err := u.top()
		if err != nil {
			return err
		}
		s, ok := t.(*set)
		if !ok {
			return u.errorf("ADDITEMS to %s", typeName(t))
		}
		s.items = append(s.items, items...)
	case 0x91: // FROZENSET
		items, err := u.popMark()
		if err != nil {
			return err
		}
		u.push(&set{items: items})
	case 'g', 'h', 'j': // GET, BINGET, LONG_BINGET
		i, err := u.memoIndex(op, lengthSize(op))
		if err != nil {
			return err
		}
		return u.memoGet(i)
	case 'p', 'q', 'r': // PUT, BINPUT, LONG_BINPUT
		i, err := u.memoIndex(op, lengthSize(op))
		if err != nil {
			return err
		}
		return u.memoPut(i)
	case 0x94: // MEMOIZE
		return u.memoPut(uint64(len(u.memo)))
	case 'c': // GLOBAL
		mod, err := u.readLine()
		if err != nil {
			return err
		}
		name, err := u.readLine()
		if err != nil {
			return err
		}
		u.push(global{mod, name})
	case 0x93: // STACK_GLOBAL
		mn, err := u.popN(2)
		if err != nil {
			return err
		}
		mod, ok1 := mn[0].(string)
		name, ok2 := mn[1].(string)
		if !ok1 || !ok2 {
			return u.errorf("STACK_GLOBAL of %s and %s", typeName(mn[0]), typeName(mn[1]))
		}
		u.push(global{mod, name})
	case 'R': // REDUCE: callable, args
		if err := u.apply(2, "REDUCE"); err != nil {
			return err
		}
	case 0x81: // NEWOBJ: class, args
		if err := u.apply(2, "NEWOBJ"); err != nil {
			return err
		}
	case 0x92: // NEWOBJ_EX: class, args, kwargs
		if err := u.apply(3, "NEWOBJ_EX"); err != nil {
			return err
		}
	case 'i': // INST
		mod, err := u.readLine()
		if err != nil {
			return err
		}
		name, err := u.readLine()
		if err != nil {
			return err
		}
		args, err := u.popMark()
		if err != nil {
			return err
		}
		if err := u.callPush(global{mod, name}, args); err != nil {
			return err
		}
	case 'o': // OBJ
		items, err := u.popMark()
		if err != nil {
			return err
		}
		if len(items) == 0 {
			return u.errorf("OBJ without a class")
		}
		if err := u.callPush(items[0], items[1:]); err != nil {
			return err
		}
	case 'b': // BUILD
		state, err := u.pop()
		if err != nil {
			return err
		}
		t, err := u.top()
		if err != nil {
			return err
		}
		if o, ok := t.(*object); ok {
			o.state = state
		}
		// Other values (OrderedDict's _metadata, tensor state) need no state here.
	case 'Q': // BINPERSID
		pid, err := u.pop()
		if err != nil {
			return err
		}
		return u.persistent(pid)
	case 'P': // PERSID
		line, err := u.readLine()
		if err != nil {
			return err
		}
		return u.persistent(line)
	default:
		return u.errorf("unsupported opcode 0x%02x", op)
	}
	return nil
}

func (u *unpickler) memoIndex(op byte, size int) (uint64, error) {
	if size > 0 {
		return u.readUint(size)
	}
	line, err := u.readLine()
	if err != nil {
		return 0, err
	}
	i, err := strconv.ParseUint(line, 10, 32)
	if err != nil {
		return 0, u.errorf("bad memo index %q for opcode %q", line, op)
	}
	return i, nil
}

func (u *unpickler) persistent(pid any) error {
	if u.hooks.persistent == nil {
		return u.errorf("persistent ID without a loader")
	}
	v, err := u.hooks.persistent(pid)
	if err != nil {
		return err
	}
	u.push(v)
	return nil
}

func (u *unpickler) appendTo(items []any) error {
	t, err := u.top()
	if err != nil {
		return err
	}
	switch l := t.(type) {
	case *list:
		l.items = append(l.items, items...)
	case *object:
		// list subclasses: keep the items in the state
		l.state = items
	default:
		return u.errorf("APPEND to %s", typeName(t))
	}
	return nil
}

func (u *unpickler) setItemsOnTop(items []any) error {
	t, err := u.top()
	if err != nil {
		return err
	}
	d, ok := t.(*dict)
	if !ok {
		if _, ok := t.(*object); ok {
			return nil // dict subclasses we do not know: their items are not needed
		}
		return u.errorf("SETITEM on %s", typeName(t))
	}
	return u.setItems(d, items)
}

func (u *unpickler) setItems(d *dict, items []any) error {
	if len(items)%2 != 0 {
		return u.errorf("odd number of dict items")
	}
	for i := 0; i < len(items); i += 2 {
		d.set(items[i], items[i+1])
	}
	return nil
}

// lengthSize is the size in bytes of the length or index argument of op; 0 for
// opcodes whose argument is a text line.
func lengthSize(op byte) int {
	switch op {
	case 0x8c, 'C', 'h', 'q':
		return 1
	case 'X', 'B', 'j', 'r':
		return 4
	case 0x8d, 0x8e, 0x96:
		return 8
	}
	return 0
}

// decodeLong decodes a little-endian two's complement integer.
func decodeLong(b []byte) any {
	if len(b) == 0 {
		return int64(0)
	}
	if len(b) <= 8 {
		var v uint64
		for i := len(b) - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
		shift := 64 - 8*uint(len(b))
		return int64(v<<shift) >> shift
	}
	be := make([]byte, len(b))
	for i := range b {
		be[len(b)-1-i] = b[i]
	}
	v := new(big.Int).SetBytes(be)
	if b[len(b)-1]&0x80 != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return v
}

// pickleNamer is implemented by values the hooks return, to name them in errors.
type pickleNamer interface{ pickleName() string }

func typeName(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case bool:
		return "bool"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []byte:
		return "bytes"
	case tuple:
		return "tuple"
	case *list:
		return "list"
	case *dict:
		return "dict"
	case *set:
		return "set"
	case global:
		return "global " + v.module + "." + v.name
	case *object:
		return v.class.module + "." + v.class.name + " object"
	case pickleNamer:
		return v.pickleName()
	}
	return fmt.Sprintf("%T", v)
}

// apply pops n stack items, calls the first with the second (a tuple) as its
// arguments (a NEWOBJ_EX's keyword arguments, the third, are not used by
// anything torch.save writes) and pushes the result.
func (u *unpickler) apply(n int, op string) error {
	items, err := u.popN(n)
	if err != nil {
		return err
	}
	args, ok := items[1].(tuple)
	if !ok {
		return u.errorf("%s with %s arguments", op, typeName(items[1]))
	}
	return u.callPush(items[0], args)
}

// callPush calls callable, which must be a global, with args and pushes the
// result.
func (u *unpickler) callPush(callable any, args []any) error {
	g, ok := callable.(global)
	if !ok {
		return u.errorf("call of %s", typeName(callable))
	}
	call := u.hooks.call
	if call == nil {
		call = callBuiltin
	}
	v, err := call(g, tuple(args))
	if err != nil {
		return err
	}
	u.push(v)
	return nil
}
