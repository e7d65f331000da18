package protocol

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"google.golang.org/grpc/codes"

	"github.com/inferbench/inferbench/inference"
)

// System shared memory (Triton's extension_shared_memory.md): a client
// creates a POSIX shared-memory object (shm_open), registers a region of it
// under a name, and names that region in an input's or an output's
// shared_memory_region parameter instead of sending the tensor.
//
//  1. Register opens /dev/shm/<key without its leading slashes>, checks that
//     offset and byte_size lie inside the object, maps the pages that hold
//     the region (mmap, shared, read-write) and has the server's back-end
//     prepare them once (Server.RegisterHost: page-locked on CUDA, so
//     copy-in is a DMA straight from the client's memory).
//  2. A request that names the region holds a reference to it from decoding
//     until the server answered it (and no longer reads the input or writes
//     the logits). An FP32 input is used in place: Request.Input.Data is a
//     float32 view of the mapping, never copied by the front door; so is a
//     UINT8 input, as bytes, when the server normalises on the device; FP16
//     and other UINT8 inputs are widened into a pooled buffer. The logits are written
//     into the output region through Request.Logits, a view of it.
//  3. Unregister removes the name at once, so no new request can use the
//     region; the mapping is undone (unregistered from the back-end, then
//     unmapped) when the last request holding it is answered. So a region
//     unregistered while in use never fails the requests already using it,
//     and nothing reads or writes memory that is no longer mapped.
//
// Regions are bounded in number and in total size (SharedMemoryLimits); a
// region unregistered but still in use counts until it is unmapped.
//
// What this cannot prevent: the client owns the object, and a client that
// shrinks it (ftruncate) below a registered region while the server uses
// the region makes the server's next access to the lost pages fault
// (SIGBUS), as with Triton. Only processes that may open the server's
// /dev/shm objects can do that.

// Defaults of SharedMemoryLimits.
const (
	DefaultMaxRegions        = 64
	DefaultSharedMemoryBytes = 16 << 30
	// DefaultSharedMemoryDir is where Linux keeps POSIX shared-memory objects.
	DefaultSharedMemoryDir = "/dev/shm"
)

// SharedMemoryLimits bound the system shared-memory regions clients may
// register.
type SharedMemoryLimits struct {
	// MaxRegions bounds the regions mapped at once; 0 means
	// DefaultMaxRegions, and a negative value turns system shared memory off
	// (registration fails, and the extension is not reported).
	MaxRegions int
	// MaxBytes bounds their total byte size; 0 means
	// DefaultSharedMemoryBytes.
	MaxBytes int64
	// Dir holds the shared-memory objects that keys name; "" means
	// DefaultSharedMemoryDir (tests use a temporary directory).
	Dir string
}

func (l SharedMemoryLimits) withDefaults() SharedMemoryLimits {
	if l.MaxRegions == 0 {
		l.MaxRegions = DefaultMaxRegions
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultSharedMemoryBytes
	}
	if l.Dir == "" {
		l.Dir = DefaultSharedMemoryDir
	}
	return l
}

// shmRegion is one registered region and its mapping.
type shmRegion struct {
	name, key    string
	offset, size uint64 // as registered: bytes into the object, bytes
	mapping      []byte // what mmap returned: whole pages holding the region
	data         []byte // the region itself, size bytes of mapping
	start        uint64 // offset of mapping[0] in the object (page-aligned)
	unregister   func() error

	// Under shmRegistry.mu.
	refs int  // requests holding the region
	gone bool // unregistered: unmapped when refs drops to 0
}

// shmRegistry holds a Service's system shared-memory regions. Its methods
// are safe for concurrent use.
type shmRegistry struct {
	limits SharedMemoryLimits
	// pin prepares a new mapping for direct copies (Server.RegisterHost);
	// when it fails, the region is used unprepared and log says why.
	pin func([]byte) (func() error, error)
	log *slog.Logger

	// regMu serialises registration and unregistration (mapping and pinning
	// take long), so that inference requests, which take only mu, never wait
	// for them.
	regMu sync.Mutex

	mu      sync.Mutex
	byName  map[string]*shmRegion
	regions int   // mapped now, including unregistered ones still in use
	bytes   int64 // their registered sizes
	errs    []error
}

func newSHMRegistry(limits SharedMemoryLimits, pin func([]byte) (func() error, error), log *slog.Logger) *shmRegistry {
	return &shmRegistry{limits: limits.withDefaults(), pin: pin, log: log, byName: map[string]*shmRegion{}}
}

// enabled reports whether clients may register regions.
func (r *shmRegistry) enabled() bool { return r.limits.MaxRegions > 0 && shmSupported }

// alreadyExists is a name taken: 409, AlreadyExists.
func alreadyExists(format string, args ...any) *Error {
	return &Error{Status: http.StatusConflict, Code: codes.AlreadyExists, Msg: fmt.Sprintf(format, args...)}
}

// checkKey turns a POSIX shared-memory name into the object's file name as
// glibc's shm_open does: leading slashes dropped, and no other slash, no
// "." or "..", nothing empty.
func checkKey(key string) (string, error) {
	file := strings.TrimLeft(key, "/")
	if file == "" || file == "." || file == ".." || strings.ContainsAny(file, "/\x00") || len(file) > 255 {
		return "", badRequest("shared-memory key %q: want a POSIX shared-memory name, \"/name\" with no other slash", key)
	}
	return file, nil
}

// register maps a new region.
func (r *shmRegistry) register(name, key string, offset, size uint64) error {
	if !r.enabled() {
		return &Error{Status: http.StatusBadRequest, Code: codes.Unimplemented, Msg: "system shared memory is turned off on this server"}
	}
	if name == "" || len(name) > 255 || strings.ContainsRune(name, 0) {
		return badRequest("shared-memory region name %q: want 1 to 255 bytes", name)
	}
	file, err := checkKey(key)
	if err != nil {
		return err
	}
	if size == 0 {
		return badRequest("shared-memory region %q: byte_size 0, want at least 1", name)
	}
	r.regMu.Lock()
	defer r.regMu.Unlock()
	r.mu.Lock()
	_, taken := r.byName[name]
	regions, bytes := r.regions, r.bytes
	r.mu.Unlock()
	switch {
	case taken:
		return alreadyExists("shared-memory region %q is already registered (unregister it first)", name)
	case regions >= r.limits.MaxRegions:
		return &Error{Status: http.StatusBadRequest, Code: codes.ResourceExhausted,
			Msg: fmt.Sprintf("shared-memory region %q: this server maps at most %d regions, and %d are mapped (unregister some)", name, r.limits.MaxRegions, regions)}
	case size > uint64(r.limits.MaxBytes-bytes):
		return &Error{Status: http.StatusBadRequest, Code: codes.ResourceExhausted,
			Msg: fmt.Sprintf("shared-memory region %q: %d bytes would pass this server's limit of %d bytes of regions (%d mapped)", name, size, r.limits.MaxBytes, bytes)}
	}
	reg := &shmRegion{name: name, key: key, offset: offset, size: size}
	if err := mapRegion(reg, r.limits.Dir, file); err != nil {
		return err
	}
	if reg.unregister, err = r.pin(reg.mapping); err != nil {
		// The region still works: the back-end copies from it as from any
		// pageable memory (through its staging buffers on CUDA), slower.
		r.log.Warn("shared-memory region registered without page-locking: copies from it go through staging", "region", name, "key", key, "err", err)
		reg.unregister = func() error { return nil }
	}
	r.mu.Lock()
	r.byName[name] = reg
	r.regions++
	r.bytes += int64(size)
	r.mu.Unlock()
	return nil
}

// unregister removes the region called name, or every region when name is
// empty. As Triton does, an unknown name is not an error. A region in use is
// unmapped when its last request is answered.
func (r *shmRegistry) unregister(name string) error {
	r.regMu.Lock()
	defer r.regMu.Unlock()
	var now []*shmRegion
	r.mu.Lock()
	for n, reg := range r.byName {
		if name != "" && n != name {
			continue
		}
		delete(r.byName, n)
		reg.gone = true
		if reg.refs == 0 {
			now = append(now, reg)
		}
	}
	r.mu.Unlock()
	var errs []error
	for _, reg := range now {
		errs = append(errs, r.unmap(reg))
	}
	return errors.Join(errs...)
}

// unmap undoes a region nobody uses any more and returns its budget.
func (r *shmRegistry) unmap(reg *shmRegion) error {
	err := errors.Join(reg.unregister(), unmapRegion(reg))
	if err != nil {
		err = fmt.Errorf("protocol: unmapping shared-memory region %q: %w", reg.name, err)
	}
	r.mu.Lock()
	r.regions--
	r.bytes -= int64(reg.size)
	if err != nil {
		r.errs = append(r.errs, err)
	}
	r.mu.Unlock()
	return err
}

// regionStatus is one region as the status endpoints report it.
type regionStatus struct {
	Name     string `json:"name"`
	Key      string `json:"key"`
	Offset   uint64 `json:"offset"`
	ByteSize uint64 `json:"byte_size"`
}

// status lists the region called name, or every region (by name) when name
// is empty.
func (r *shmRegistry) status(name string) ([]regionStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []regionStatus
	for n, reg := range r.byName {
		if name == "" || n == name {
			out = append(out, regionStatus{Name: n, Key: reg.key, Offset: reg.offset, ByteSize: reg.size})
		}
	}
	if name != "" && len(out) == 0 {
		return nil, notFound("unknown system shared-memory region %q", name)
	}
	slices.SortFunc(out, func(a, b regionStatus) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// shmRef is a tensor's shared-memory parameters.
type shmRef struct {
	region       string
	offset, size int64
}

// Parameter names of the shared-memory extension.
const (
	paramShmOffset   = "shared_memory_offset"
	paramShmByteSize = "shared_memory_byte_size"
)

// shmRef reads a tensor's shared-memory parameters: nil when it has none.
// The region and the byte size come together; the offset is optional (0).
func (p params) shmRef(where string) (*shmRef, error) {
	v, hasRegion := p[paramShmRegion]
	size, hasSize := p[paramShmByteSize]
	off, hasOffset := p[paramShmOffset]
	if !hasRegion {
		if hasSize || hasOffset {
			return nil, badRequest("%s: %s and %s need %s", where, paramShmByteSize, paramShmOffset, paramShmRegion)
		}
		return nil, nil
	}
	ref := &shmRef{}
	var ok bool
	if ref.region, ok = v.(string); !ok || ref.region == "" {
		return nil, badRequest("%s: parameter %q must be a region's name, got %v", where, paramShmRegion, v)
	}
	if !hasSize {
		return nil, badRequest("%s: %s %q without %s", where, paramShmRegion, ref.region, paramShmByteSize)
	}
	if ref.size, ok = asInt64(size); !ok || ref.size < 0 {
		return nil, badRequest("%s: parameter %q must be a non-negative integer, got %v", where, paramShmByteSize, size)
	}
	if hasOffset {
		if ref.offset, ok = asInt64(off); !ok || ref.offset < 0 {
			return nil, badRequest("%s: parameter %q must be a non-negative integer, got %v", where, paramShmOffset, off)
		}
	}
	return ref, nil
}

// acquire returns the bytes ref names, holding its region until release is
// called. want is the byte size the tensor needs: the reference's byte size
// must equal it (exact) or hold it (!exact); align is the alignment the data
// needs in memory.
func (r *shmRegistry) acquire(where string, ref *shmRef, want int64, exact bool, align int) ([]byte, *shmRegion, error) {
	switch {
	case exact && ref.size != want:
		return nil, nil, badRequest("%s: %s %d, want %d", where, paramShmByteSize, ref.size, want)
	case !exact && ref.size < want:
		return nil, nil, badRequest("%s: %s %d is too small: the tensor needs %d bytes", where, paramShmByteSize, ref.size, want)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	reg := r.byName[ref.region]
	if reg == nil {
		return nil, nil, notFound("%s: unknown shared-memory region %q (register it first)", where, ref.region)
	}
	if uint64(ref.offset) > reg.size || uint64(ref.size) > reg.size-uint64(ref.offset) {
		return nil, nil, badRequest("%s: shared-memory region %q holds %d bytes: %s %d + %s %d runs past its end",
			where, ref.region, reg.size, paramShmOffset, ref.offset, paramShmByteSize, ref.size)
	}
	b := reg.data[ref.offset : ref.offset+want : ref.offset+want]
	if align > 1 && want > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(align) != 0 {
		return nil, nil, badRequest("%s: data at byte %d of shared-memory object %q is not %d-byte aligned, as its elements must be (region offset %d + tensor offset %d)",
			where, reg.offset+uint64(ref.offset), reg.key, align, reg.offset, ref.offset)
	}
	reg.refs++
	return b, reg, nil
}

// release lets go of a region acquire returned; the last release of an
// unregistered region unmaps it.
func (r *shmRegistry) release(reg *shmRegion) {
	r.mu.Lock()
	reg.refs--
	last := reg.refs == 0 && reg.gone
	r.mu.Unlock()
	if last {
		r.unmap(reg) // its error is kept for close
	}
}

// close unregisters every region; call it once no request holds one. It
// returns the errors of every unmapping so far.
func (r *shmRegistry) close() error {
	err := r.unregister("")
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		err = errors.Join(r.errs...)
	}
	return err
}

// releaser returns the done function of a request that holds reg (see
// Model.run): it lets the region go once the server no longer touches the
// request's memory. When the server was closed under an accepted request
// (Server.Close), the answer came before the workers left the batch, so the
// region is released only after Close returned (a second Close waits for the
// first to finish).
func (r *shmRegistry) releaser(srv *inference.Server, reg *shmRegion) func(closed bool) {
	return func(closed bool) {
		if !closed {
			r.release(reg)
			return
		}
		go func() {
			srv.Close()
			r.release(reg)
		}()
	}
}

// float32View is b as float32 values (b is 4-byte aligned and a multiple of
// 4 bytes long: acquire checked both).
func float32View(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}
