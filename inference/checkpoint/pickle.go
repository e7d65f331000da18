package checkpoint

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"slices"
	"strconv"
	"unsafe"
)

// This file is a small unpickler for what pickle writers emit in protocols 0 to 5
// (minus extension codes and out-of-band buffers). It never runs code, and it knows
// Python's built-in types only: what a persistent ID refers to and what calling a
// global makes are hooks its user passes (torch.go's for torch.save files). Without
// a hook, a call makes an opaque *object.
//
// Every opcode costs amortised O(1) time, so reading a pickle takes time linear in
// its length; memory is bounded by pickleLimits and a budget (see budget).

// pickle values: nil (None), bool, int64, *big.Int, float64, string, []byte,
// tuple, *list, *dict, *set, global, *object, and what the hooks return.
type (
	tuple []any
	list  struct{ items []any }
	set   struct{ items []any }
	// dict keeps insertion order. Keys of the hashable types it supports (None,
	// bool, int64, float64, str, global) are compared by value; other keys are
	// dropped, as Python could not have pickled most of them either. A dict of
	// more than smallDict keys finds them through index.
	dict struct {
		keys  []any
		vals  []any
		index map[any]int // position in keys, by indexKey
	}
	global struct{ module, name string }
	// object is an instance of a class the unpickler's hooks do not know.
	object struct {
		class global
		args  tuple
		state any
	}
)

// smallDict is the most keys a dict finds by scanning them.
const smallDict = 8

// find returns the position of key k, or -1.
func (d *dict) find(k any) int {
	if d.index != nil {
		if i, ok := d.index[indexKey(k)]; ok {
			return i
		}
		return -1
	}
	for i, x := range d.keys {
		if sameKey(x, k) {
			return i
		}
	}
	return -1
}

// get returns the value under the string key k, which must be at most
// internMin bytes long (lookups from Go code use short literal keys).
func (d *dict) get(k string) (any, bool) {
	if len(k) > internMin {
		return nil, false
	}
	if i := d.find(k); i >= 0 {
		return d.vals[i], true
	}
	return nil, false
}

// internMin is the length above which the unpickler interns strings: all equal
// strings longer than this share one copy, so a dict hashes them by address.
const internMin = 64

// longString is how the dict index sees a string longer than internMin bytes:
// by its (interned, hence unique) address, so that hashing a key costs O(1)
// however long the key is.
type longString struct {
	p *byte
	n int
}

// globalKey is how the dict index sees a global.
type globalKey struct{ module, name any }

// hashable reports whether k can be a dict key.
func hashable(k any) bool {
	switch k.(type) {
	case nil, bool, int64, float64, string, global:
		return true
	}
	return false
}

// indexKey is the hashable key k as the dict index stores it.
func indexKey(k any) any {
	switch k := k.(type) {
	case string:
		if len(k) > internMin {
			return longString{unsafe.StringData(k), len(k)}
		}
	case global:
		return globalKey{indexKey(k.module), indexKey(k.name)}
	}
	return k
}

// sameKey compares hashable keys as the index does, in O(1) time.
func sameKey(a, b any) bool {
	switch a := a.(type) {
	case string:
		b, ok := b.(string)
		return ok && sameStr(a, b)
	case global:
		b, ok := b.(global)
		return ok && sameStr(a.module, b.module) && sameStr(a.name, b.name)
	}
	return a == b
}

func sameStr(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) > internMin {
		return unsafe.StringData(a) == unsafe.StringData(b)
	}
	return a == b
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

// pickleLimits bound what one pickle may make the unpickler hold, beyond the
// memory budget that all values share. The defaults are far above what a state
// dict needs (a torchvision ResNet-152 pickle needs a stack of 1,872 values, 3
// marks and 8,003 memo entries; see TestResNet152Shaped) and far below what would
// exhaust memory.
type pickleLimits struct {
	stack  int   // values on the stack
	marks  int   // MARKs open at once; Python's pickler opens one per nesting level
	memo   int   // memo entries
	object int64 // bytes of one str, bytes or int, and of one text line
	global int   // bytes of a global's module or name
}

var defaultPickleLimits = pickleLimits{
	stack:  1 << 20,
	marks:  1 << 12, // Python's recursion limit, 1,000 by default, nests less
	memo:   1 << 20,
	object: 16 << 20,
	global: 1 << 10,
}

// maxIntDigits bounds the decimal digits of a text INT or LONG: it is Python's
// own default limit (sys.get_int_max_str_digits()), and it keeps their
// conversion, which is quadratic in the digits, cheap.
const maxIntDigits = 4300

// budget is the memory, in bytes, that decoding one file may still take: the
// unpickler charges every value before it makes it, and flatten its names. The
// charges estimate Go's memory (headers, slice growth, map entries), so that the
// budget bounds what the process allocates, not only what the file declares.
type budget struct {
	left  int64
	limit int64
	why   string // how limit follows from the file, for the error
}

func newBudget(limit int64, why string) *budget {
	return &budget{left: limit, limit: limit, why: why}
}

// charge takes n bytes from the budget, or fails with ErrTooLarge naming the
// limit.
func (b *budget) charge(n int64) error {
	if n > b.left {
		b.left = 0
		return fmt.Errorf("%w: decoding needs more than %d bytes of memory (%s)", ErrTooLarge, b.limit, b.why)
	}
	b.left -= n
	return nil
}

// Estimated Go memory of the values the unpickler makes, charged to the budget;
// the slices it grows (the stack, lists, sets, dicts) are charged exactly, by grow.
const (
	valueCost  = 16  // a boxed scalar or a string header
	objectCost = 64  // a container, global, object or call result
	entryCost  = 128 // a map entry (dict index, sparse memo, interned string), with the map's growth
	slotBytes  = 16  // an element of a []any
)

// unpickler reads one pickle from r. limit is the number of bytes left in the
// input; no length read from the stream may exceed it.
type unpickler struct {
	r     *bufio.Reader
	limit int64
	hooks pickleHooks
	lim   pickleLimits
	mem   *budget
	stack []any
	marks []int
	// memo holds entries 0, 1, 2, ... as Python's picklers number them; sparse
	// the others, so that a large index cannot claim a large slice.
	memo    []any
	memoOK  []bool // whether memo[i] was put
	memoSet int    // entries put in memo
	sparse  map[uint32]any
	intern  map[string]string
	line    []byte // scratch for text lines
	// high-water marks, for tests and for choosing the limits
	maxStack, maxMarks int
}

var errStop = errors.New("stop")

func newUnpickler(r *bufio.Reader, limit int64, mem *budget, hooks pickleHooks) *unpickler {
	return &unpickler{
		r: r, limit: limit, hooks: hooks, lim: defaultPickleLimits, mem: mem,
		sparse: make(map[uint32]any), intern: make(map[string]string),
	}
}

func (u *unpickler) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: bad pickle: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

func (u *unpickler) tooLarge(format string, args ...any) error {
	return fmt.Errorf("%w: pickle: %s", ErrTooLarge, fmt.Sprintf(format, args...))
}

func (u *unpickler) readByte() (byte, error) {
	if u.limit <= 0 {
		return 0, u.errorf("unexpected end of data")
	}
	b, err := u.r.ReadByte()
	if err != nil {
		return 0, u.readError(err)
	}
	u.limit--
	return b, nil
}

// readError describes a failed read: the input ended, or the reader under it
// failed (a zip entry's checksum, say).
func (u *unpickler) readError(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return u.errorf("unexpected end of data")
	}
	return u.errorf("reading: %v", err)
}

// readInto fills b from the input.
func (u *unpickler) readInto(b []byte) error {
	if int64(len(b)) > u.limit {
		return u.errorf("unexpected end of data: length %d exceeds the %d bytes left", len(b), u.limit)
	}
	if _, err := io.ReadFull(u.r, b); err != nil {
		return u.readError(err)
	}
	u.limit -= int64(len(b))
	return nil
}

// readObject reads the n bytes of one str, bytes or int, checking n against the
// input left and the object limit and charging them before it allocates.
func (u *unpickler) readObject(n uint64, what string) ([]byte, error) {
	if n > uint64(u.limit) {
		return nil, u.errorf("unexpected end of data: %s of %d bytes exceeds the %d bytes left", what, n, u.limit)
	}
	if n > uint64(u.lim.object) {
		return nil, u.tooLarge("%s of %d bytes, more than the limit of %d", what, n, u.lim.object)
	}
	if err := u.mem.charge(int64(n) + valueCost); err != nil {
		return nil, err
	}
	b := make([]byte, n)
	return b, u.readInto(b)
}

func (u *unpickler) readUint(n int) (uint64, error) {
	var b [8]byte
	if err := u.readInto(b[:n]); err != nil {
		return 0, err
	}
	var v uint64
	for i := n - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v, nil
}

// readLine reads a text argument up to '\n'; the result is valid until the next
// readLine.
func (u *unpickler) readLine() ([]byte, error) {
	u.line = u.line[:0]
	for {
		b, err := u.readByte()
		if err != nil {
			return nil, err
		}
		if b == '\n' {
			if n := len(u.line); n > 0 && u.line[n-1] == '\r' {
				return u.line[:n-1], nil
			}
			return u.line, nil
		}
		if int64(len(u.line)) >= min(u.lim.object, 1<<16) {
			return nil, u.tooLarge("text line longer than %d bytes", min(u.lim.object, 1<<16))
		}
		u.line = append(u.line, b)
	}
}

// str makes a str value of b, which it copies. Strings longer than internMin
// are interned: equal ones share one copy (see longString). Looking b up hashes
// it once, which its reading has paid for.
func (u *unpickler) str(b []byte) (string, error) {
	if len(b) <= internMin {
		return string(b), u.mem.charge(int64(len(b)) + valueCost)
	}
	if s, ok := u.intern[string(b)]; ok {
		return s, nil
	}
	if err := u.mem.charge(int64(len(b)) + valueCost + entryCost); err != nil {
		return "", err
	}
	s := string(b)
	u.intern[s] = s
	return s, nil
}

// strOwned is str for a fresh b from readObject, which readObject has charged
// and which nothing else references: the string shares its bytes.
func (u *unpickler) strOwned(b []byte) (string, error) {
	if len(b) == 0 {
		return "", nil
	}
	s := unsafe.String(unsafe.SliceData(b), len(b))
	if len(b) <= internMin {
		return s, nil
	}
	if is, ok := u.intern[s]; ok {
		return is, nil
	}
	if err := u.mem.charge(entryCost); err != nil {
		return "", err
	}
	u.intern[s] = s
	return s, nil
}

// name makes the module or name of a global.
func (u *unpickler) name(b []byte) (string, error) {
	if len(b) > u.lim.global {
		return "", u.tooLarge("global name of %d bytes, more than the limit of %d", len(b), u.lim.global)
	}
	return u.str(b)
}

// grow makes room for n more items in s, doubling its capacity (append's
// growth of a quarter would allocate five times the final size along the way),
// and charges the new array.
func (u *unpickler) grow(s []any, n int) ([]any, error) {
	if len(s)+n <= cap(s) {
		return s, nil
	}
	c := max(2*cap(s), len(s)+n, 4)
	if err := u.mem.charge(slotBytes * int64(c)); err != nil {
		return nil, err
	}
	g := make([]any, len(s), c)
	copy(g, s)
	return g, nil
}

func (u *unpickler) push(v any) error {
	if len(u.stack) == cap(u.stack) {
		if len(u.stack) >= u.lim.stack {
			return u.tooLarge("more than %d values on the stack (the limit)", u.lim.stack)
		}
		var err error
		if u.stack, err = u.grow(u.stack, 1); err != nil {
			return err
		}
	}
	u.stack = append(u.stack, v)
	u.maxStack = max(u.maxStack, len(u.stack))
	return nil
}

// floor is the stack height below which pop may not reach: the last mark.
func (u *unpickler) floor() int {
	if len(u.marks) > 0 {
		return u.marks[len(u.marks)-1]
	}
	return 0
}

func (u *unpickler) pop() (any, error) {
	n := len(u.stack)
	if n <= u.floor() {
		return nil, u.errorf("stack underflow")
	}
	v := u.stack[n-1]
	u.stack[n-1] = nil
	u.stack = u.stack[:n-1]
	return v, nil
}

func (u *unpickler) top() (any, error) {
	n := len(u.stack)
	if n <= u.floor() {
		return nil, u.errorf("stack underflow")
	}
	return u.stack[n-1], nil
}

// popMark removes the last mark and the items above it, and returns them in a
// slice that the next push overwrites: the caller copies or consumes them first.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, u.errorf("no mark on the stack")
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	items := u.stack[m:]
	u.stack = u.stack[:m]
	return items, nil
}

// popN is popMark for the top n items.
func (u *unpickler) popN(n int) ([]any, error) {
	if len(u.stack)-u.floor() < n {
		return nil, u.errorf("stack underflow")
	}
	items := u.stack[len(u.stack)-n:]
	u.stack = u.stack[:len(u.stack)-n]
	return items, nil
}

// collect copies popped items into a new container's slice, charging for it.
func (u *unpickler) collect(items []any) ([]any, error) {
	if err := u.mem.charge(objectCost + slotBytes*int64(len(items))); err != nil {
		return nil, err
	}
	out := slices.Clone(items)
	clear(items)
	return out, nil
}

func (u *unpickler) memoGet(i uint64) error {
	if i < uint64(len(u.memo)) && u.memoOK[i] {
		return u.push(u.memo[i])
	}
	v, ok := u.sparse[uint32(i)]
	if !ok || i > math.MaxUint32 {
		return u.errorf("memo key %d not found", i)
	}
	return u.push(v)
}

// memoLen is the number of memo entries.
func (u *unpickler) memoLen() int { return u.memoSet + len(u.sparse) }

func (u *unpickler) memoPut(i uint64) error {
	if i > math.MaxUint32 {
		return u.errorf("memo key %d too large", i)
	}
	v, err := u.top()
	if err != nil {
		return err
	}
	switch {
	case i < uint64(len(u.memo)):
		if !u.memoOK[i] {
			if err := u.memoAdd(); err != nil {
				return err
			}
			u.memoOK[i] = true
			u.memoSet++
		}
		u.memo[i] = v
		return nil
	case i == uint64(len(u.memo)):
		if _, ok := u.sparse[uint32(i)]; !ok {
			if err := u.memoAdd(); err != nil {
				return err
			}
			if len(u.memo) == cap(u.memo) {
				if u.memo, err = u.grow(u.memo, 1); err != nil {
					return err
				}
				ok := make([]bool, len(u.memoOK), cap(u.memo))
				copy(ok, u.memoOK)
				u.memoOK = ok
			}
			u.memo = append(u.memo, v)
			u.memoOK = append(u.memoOK, true)
			u.memoSet++
			return nil
		}
	default:
		if _, ok := u.sparse[uint32(i)]; !ok {
			if err := u.memoAdd(); err != nil {
				return err
			}
			if err := u.mem.charge(entryCost); err != nil {
				return err
			}
		}
	}
	u.sparse[uint32(i)] = v
	return nil
}

// memoAdd checks that the memo may take one more entry.
func (u *unpickler) memoAdd() error {
	if u.memoLen() >= u.lim.memo {
		return u.tooLarge("more than %d memo entries (the limit)", u.lim.memo)
	}
	return nil
}

// load runs the pickle to its STOP opcode and returns the value left.
func (u *unpickler) load() (any, error) {
	for {
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
		if len(u.marks) >= u.lim.marks {
			return u.tooLarge("more than %d marks open (the limit)", u.lim.marks)
		}
		u.marks = append(u.marks, len(u.stack))
		u.maxMarks = max(u.maxMarks, len(u.marks))
	case '0': // POP
		if len(u.marks) > 0 && u.marks[len(u.marks)-1] == len(u.stack) {
			u.marks = u.marks[:len(u.marks)-1]
			return nil
		}
		_, err := u.pop()
		return err
	case '1': // POP_MARK
		items, err := u.popMark()
		clear(items)
		return err
	case '2': // DUP
		v, err := u.top()
		if err != nil {
			return err
		}
		return u.push(v)
	case 'N':
		return u.push(nil)
	case 0x88:
		return u.push(true)
	case 0x89:
		return u.push(false)
	case 'K', 'M': // BININT1, BININT2
		v, err := u.readUint(lengthSize(op))
		if err != nil {
			return err
		}
		return u.pushScalar(int64(v))
	case 'J': // BININT
		v, err := u.readUint(4)
		if err != nil {
			return err
		}
		return u.pushScalar(int64(int32(uint32(v))))
	case 0x8a, 0x8b: // LONG1, LONG4
		size := 1
		if op == 0x8b {
			size = 4
		}
		n, err := u.readUint(size)
		if err != nil {
			return err
		}
		b, err := u.readObject(n, "int")
		if err != nil {
			return err
		}
		return u.push(decodeLong(b))
	case 'I', 'L': // INT, LONG (text)
		line, err := u.readLine()
		if err != nil {
			return err
		}
		if op == 'L' && len(line) > 0 && line[len(line)-1] == 'L' {
			line = line[:len(line)-1]
		}
		return u.textInt(line)
	case 'G': // BINFLOAT, big-endian
		var b [8]byte
		if err := u.readInto(b[:]); err != nil {
			return err
		}
		return u.pushScalar(math.Float64frombits(binary.BigEndian.Uint64(b[:])))
	case 'F': // FLOAT (text)
		line, err := u.readLine()
		if err != nil {
			return err
		}
		v, err := strconv.ParseFloat(string(line), 64)
		if err != nil {
			return u.errorf("bad float %q", line)
		}
		return u.pushScalar(v)
	case 'X', 0x8c, 0x8d, 'T', 'U': // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8, BINSTRING, SHORT_BINSTRING
		n, err := u.readUint(lengthSize(op))
		if err != nil {
			return err
		}
		b, err := u.readObject(n, "str")
		if err != nil {
			return err
		}
		str, err := u.strOwned(b)
		if err != nil {
			return err
		}
		return u.push(str)
	case 'V': // UNICODE (raw-unicode-escape text; ASCII is all torch needs)
		line, err := u.readLine()
		if err != nil {
			return err
		}
		return u.pushStr(line)
	case 'S': // STRING (quoted text)
		line, err := u.readLine()
		if err != nil {
			return err
		}
		if len(line) < 2 || (line[0] != '\'' && line[0] != '"') || line[len(line)-1] != line[0] {
			return u.errorf("bad STRING %q", line)
		}
		return u.pushStr(line[1 : len(line)-1])
	case 'B', 'C', 0x8e, 0x96: // BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8
		n, err := u.readUint(lengthSize(op))
		if err != nil {
			return err
		}
		b, err := u.readObject(n, "bytes")
		if err != nil {
			return err
		}
		return u.push(b)
	case ')':
		return u.pushNew(tuple{})
	case 0x85, 0x86, 0x87: // TUPLE1, TUPLE2, TUPLE3
		items, err := u.popN(int(op-0x85) + 1)
		if err != nil {
			return err
		}
		return u.pushCollected(items, func(c []any) any { return tuple(c) })
	case 't': // TUPLE
		items, err := u.popMark()
		if err != nil {
			return err
		}
		return u.pushCollected(items, func(c []any) any { return tuple(c) })
	case ']':
		return u.pushNew(&list{})
	case 'l': // LIST
		items, err := u.popMark()
		if err != nil {
			return err
		}
		return u.pushCollected(items, func(c []any) any { return &list{items: c} })
	case 'a': // APPEND
		items, err := u.popN(1)
		if err != nil {
			return err
		}
		return u.appendTo(items)
	case 'e': // APPENDS
		items, err := u.popMark()
		if err != nil {
			return err
		}
		return u.appendTo(items)
	case '}':
		return u.pushNew(&dict{})
	case 'd': // DICT
		items, err := u.popMark()
		if err != nil {
			return err
		}
		d := &dict{}
		if err := u.setItems(d, items); err != nil {
			return err
		}
		return u.pushNew(d)
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
		return u.pushNew(&set{})
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
		if s.items, err = u.grow(s.items, len(items)); err != nil {
			return err
		}
		s.items = append(s.items, items...)
		clear(items)
	case 0x91: // FROZENSET
		items, err := u.popMark()
		if err != nil {
			return err
		}
		return u.pushCollected(items, func(c []any) any { return &set{items: c} })
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
		return u.memoPut(uint64(u.memoLen()))
	case 'c': // GLOBAL
		g, err := u.globalLines()
		if err != nil {
			return err
		}
		return u.pushNew(g)
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
		clear(mn)
		if max(len(mod), len(name)) > u.lim.global {
			return u.tooLarge("global name of %d bytes, more than the limit of %d", max(len(mod), len(name)), u.lim.global)
		}
		return u.pushNew(global{mod, name})
	case 'R': // REDUCE: callable, args
		return u.apply(2, "REDUCE")
	case 0x81: // NEWOBJ: class, args
		return u.apply(2, "NEWOBJ")
	case 0x92: // NEWOBJ_EX: class, args, kwargs
		return u.apply(3, "NEWOBJ_EX")
	case 'i': // INST
		g, err := u.globalLines()
		if err != nil {
			return err
		}
		items, err := u.popMark()
		if err != nil {
			return err
		}
		args, err := u.collect(items)
		if err != nil {
			return err
		}
		return u.callPush(g, args)
	case 'o': // OBJ
		items, err := u.popMark()
		if err != nil {
			return err
		}
		if len(items) == 0 {
			return u.errorf("OBJ without a class")
		}
		class := items[0]
		args, err := u.collect(items[1:])
		if err != nil {
			return err
		}
		items[0] = nil
		return u.callPush(class, args)
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
		pid, err := u.str(line)
		if err != nil {
			return err
		}
		return u.persistent(pid)
	default:
		return u.errorf("unsupported opcode 0x%02x", op)
	}
	return nil
}

// pushScalar pushes an int64 or float64, charging for its box.
func (u *unpickler) pushScalar(v any) error {
	if err := u.mem.charge(valueCost); err != nil {
		return err
	}
	return u.push(v)
}

// pushNew pushes a new container or global, charging for it.
func (u *unpickler) pushNew(v any) error {
	if err := u.mem.charge(objectCost); err != nil {
		return err
	}
	return u.push(v)
}

func (u *unpickler) pushStr(b []byte) error {
	s, err := u.str(b)
	if err != nil {
		return err
	}
	return u.push(s)
}

// pushCollected pushes wrap(a copy of items).
func (u *unpickler) pushCollected(items []any, wrap func([]any) any) error {
	c, err := u.collect(items)
	if err != nil {
		return err
	}
	return u.push(wrap(c))
}

// globalLines reads the module and name lines of GLOBAL and INST.
func (u *unpickler) globalLines() (global, error) {
	line, err := u.readLine()
	if err != nil {
		return global{}, err
	}
	mod, err := u.name(line)
	if err != nil {
		return global{}, err
	}
	if line, err = u.readLine(); err != nil {
		return global{}, err
	}
	name, err := u.name(line)
	return global{mod, name}, err
}

// textInt pushes the value of a protocol 0 INT or LONG line.
func (u *unpickler) textInt(line []byte) error {
	switch string(line) {
	case "00":
		return u.push(false)
	case "01":
		return u.push(true)
	}
	if v, err := strconv.ParseInt(string(line), 10, 64); err == nil {
		return u.pushScalar(v)
	}
	if digits := len(bytes.TrimLeft(line, "+-")); digits > maxIntDigits {
		return u.tooLarge("integer of %d digits, more than Python's limit of %d", digits, maxIntDigits)
	}
	if err := u.mem.charge(int64(len(line)) + objectCost); err != nil {
		return err
	}
	bi, ok := new(big.Int).SetString(string(line), 10)
	if !ok {
		return u.errorf("bad integer %q", line)
	}
	return u.push(bi)
}

func (u *unpickler) memoIndex(op byte, size int) (uint64, error) {
	if size > 0 {
		return u.readUint(size)
	}
	line, err := u.readLine()
	if err != nil {
		return 0, err
	}
	i, err := strconv.ParseUint(string(line), 10, 32)
	if err != nil {
		return 0, u.errorf("bad memo index %q for opcode %q", line, op)
	}
	return i, nil
}

func (u *unpickler) persistent(pid any) error {
	if u.hooks.persistent == nil {
		return u.errorf("persistent ID without a loader")
	}
	if err := u.mem.charge(objectCost); err != nil {
		return err
	}
	v, err := u.hooks.persistent(pid)
	if err != nil {
		return err
	}
	return u.push(v)
}

func (u *unpickler) appendTo(items []any) error {
	t, err := u.top()
	if err != nil {
		return err
	}
	switch l := t.(type) {
	case *list:
		if l.items, err = u.grow(l.items, len(items)); err != nil {
			return err
		}
		l.items = append(l.items, items...)
		clear(items)
	case *object:
		// list subclasses: keep the items in the state
		c, err := u.collect(items)
		if err != nil {
			return err
		}
		l.state = c
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
			clear(items)
			return nil // dict subclasses we do not know: their items are not needed
		}
		return u.errorf("SETITEM on %s", typeName(t))
	}
	return u.setItems(d, items)
}

// setItems stores key-value pairs in d, charging for the memory it takes.
func (u *unpickler) setItems(d *dict, items []any) error {
	if len(items)%2 != 0 {
		return u.errorf("odd number of dict items")
	}
	for i := 0; i < len(items); i += 2 {
		if err := u.setItem(d, items[i], items[i+1]); err != nil {
			return err
		}
	}
	clear(items)
	return nil
}

// setItem stores v under k in d.
func (u *unpickler) setItem(d *dict, k, v any) error {
	if !hashable(k) {
		return nil
	}
	if i := d.find(k); i >= 0 {
		d.vals[i] = v
		return nil
	}
	var err error
	if d.keys, err = u.grow(d.keys, 1); err != nil {
		return err
	}
	if d.vals, err = u.grow(d.vals, 1); err != nil {
		return err
	}
	switch {
	case d.index != nil:
		if err := u.mem.charge(entryCost); err != nil {
			return err
		}
	case len(d.keys) == smallDict:
		if err := u.mem.charge(entryCost * (smallDict + 1)); err != nil {
			return err
		}
		d.index = make(map[any]int)
		for i, k := range d.keys {
			d.index[indexKey(k)] = i
		}
	}
	if d.index != nil {
		d.index[indexKey(k)] = len(d.keys)
	}
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	return nil
}

// lengthSize is the size in bytes of the length or index argument of op; 0 for
// opcodes whose argument is a text line.
func lengthSize(op byte) int {
	switch op {
	case 0x8c, 'C', 'h', 'q', 'K', 'U':
		return 1
	case 'M':
		return 2
	case 'X', 'B', 'j', 'r', 'T':
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
	slices.Reverse(b) // big-endian for SetBytes; b is ours
	v := new(big.Int).SetBytes(b)
	if b[0]&0x80 != 0 {
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

// apply pops n stack items and calls the first with the second (a tuple) as its
// arguments (a NEWOBJ_EX's keyword arguments, the third, are not used by
// anything torch.save writes).
func (u *unpickler) apply(n int, op string) error {
	items, err := u.popN(n)
	if err != nil {
		return err
	}
	f, a := items[0], items[1]
	clear(items)
	args, ok := a.(tuple)
	if !ok {
		return u.errorf("%s with %s arguments", op, typeName(a))
	}
	return u.callPush(f, args)
}

// callPush calls callable, which must be a global, with args and pushes the
// result. args must not be a slice that popMark or popN returned: hooks keep it.
func (u *unpickler) callPush(callable any, args []any) error {
	g, ok := callable.(global)
	if !ok {
		return u.errorf("call of %s", typeName(callable))
	}
	if err := u.mem.charge(objectCost); err != nil {
		return err
	}
	call := u.hooks.call
	if call == nil {
		call = callBuiltin
	}
	v, err := call(g, tuple(args))
	if err != nil {
		return err
	}
	return u.push(v)
}
