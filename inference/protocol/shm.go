package protocol

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"google.golang.org/grpc/codes"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
)

// Shared memory (Triton's extension_shared_memory.md): a client puts a
// tensor in memory the server can reach, registers that memory as a region
// under a name, and names the region in an input's or an output's
// shared_memory_region parameter instead of sending the tensor. System and
// CUDA regions share one namespace and the steps below; only what a region
// is differs.
//
//  1. Register. System shared memory: the client creates a POSIX
//     shared-memory object (shm_open); register opens /dev/shm/<key without
//     its leading slashes>, checks that offset and byte_size lie inside the
//     object, maps the pages that hold the region (mmap, shared, read-write)
//     and has the server's back-end prepare them once (Server.RegisterHost:
//     page-locked on CUDA, so copy-in is a DMA straight from the client's
//     memory). CUDA shared memory: the client allocates GPU memory and sends
//     its CUDA IPC handle (cudaIpcGetMemHandle, 64 bytes); register maps it
//     into the server's process (Server.OpenIPC: cuIpcOpenMemHandle on the
//     cuda back-end, which checks the device and that the allocation holds
//     byte_size bytes).
//  2. A request that names the region holds a reference to it from decoding
//     until the server answered it (and no longer reads the input or writes
//     the logits). An FP32 input in a system region is used in place:
//     Request.Input.Data is a float32 view of the mapping, never copied by
//     the front door; so is a UINT8 input, as bytes, when the server
//     normalises on the device; FP16 and other UINT8 inputs are widened into
//     a pooled buffer. The logits are written into the output region through
//     Request.Logits, a view of it. A CUDA region's tensors never touch the
//     host: the input is Request.Input.Device (FP32, or UINT8 normalised on
//     the device; other datatypes are refused) and the logits go to
//     Request.DeviceLogits, both copied device to device by the back-end.
//  3. Unregister removes the name at once, so no new request can use the
//     region; the region is undone (a system region unregistered from the
//     back-end, then unmapped; a CUDA region's IPC mapping closed) when the
//     last request holding it is answered. So a region unregistered while in
//     use never fails the requests already using it, and nothing reads or
//     writes memory that is no longer mapped.
//
// Regions of both kinds are bounded in number and in total size
// (SharedMemoryLimits); a region unregistered but still in use counts until
// it is undone.
//
// The API is fenced (SharedMemoryLimits, shmaccess.go): it is off unless
// Enabled, and then answers only calls that carry the required header, when
// one is set; a system region's key must start with KeyPrefix, and its
// object must be a regular file (not a link, device, FIFO or directory)
// owned by the server's user with one name (no hard links); regions belong
// to the namespace their register call named (NamespaceHeader), and only
// calls of that namespace list, use or unregister them; an object is mapped
// by one namespace at a time.
//
// What this cannot prevent: the client owns the memory. A client that
// shrinks a system region's object (ftruncate) below the region while the
// server uses it makes the server's next access to the lost pages fault
// (SIGBUS); only processes that may open the server's /dev/shm objects can
// do that. Where Triton dies of it, every place that touches a region here
// (the front door's widening, the back-ends' reads of inputs in place, the
// logits' copy into the output region) runs with faults made panics
// (package internal/fault) that fail the request, or the batch that read
// the region in place, and the server goes on. A client that frees a CUDA allocation while
// it is registered leaves the server's mapping undefined (CUDA's rule: the
// importing process closes the handle first), as with Triton: clients
// unregister first.

// Defaults of SharedMemoryLimits.
const (
	DefaultMaxRegions        = 64
	DefaultSharedMemoryBytes = 16 << 30
	// DefaultSharedMemoryDir is where Linux keeps POSIX shared-memory objects.
	DefaultSharedMemoryDir = "/dev/shm"
	// DefaultKeyPrefix is the key prefix cmd/inferbench serve requires
	// (-shm-key-prefix) unless told otherwise.
	DefaultKeyPrefix = "inferbench-"
)

// SharedMemoryLimits turn on, bound and fence the shared-memory API: the
// regions, system and CUDA, clients may register, and who may call it. The
// zero value turns it off.
type SharedMemoryLimits struct {
	// Enabled turns the API on. When false, every call of it (register,
	// unregister, status, and an inference request that names a region) is
	// answered as by a server without the extensions (400, Unimplemented),
	// and neither extension is reported in the server metadata.
	Enabled bool
	// KeyPrefix is what every system region's key must start with, after
	// its leading slashes, so that clients can map only objects made for
	// this server; "" allows any key.
	KeyPrefix string
	// Header, when not "", names a header every call of the API must carry
	// with the value HeaderValue, or be refused (403, PermissionDenied); see
	// ParseRequiredHeader.
	Header, HeaderValue string
	// MaxRegions bounds the regions mapped at once; 0 or less means
	// DefaultMaxRegions.
	MaxRegions int
	// MaxBytes bounds their total byte size; 0 means
	// DefaultSharedMemoryBytes.
	MaxBytes int64
	// Dir holds the shared-memory objects that keys name; "" means
	// DefaultSharedMemoryDir (tests use a temporary directory).
	Dir string
}

func (l SharedMemoryLimits) withDefaults() SharedMemoryLimits {
	if l.MaxRegions <= 0 {
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

// regionKind is what a region is: system or CUDA shared memory.
type regionKind int

const (
	systemRegion regionKind = iota
	cudaRegion
)

func (k regionKind) String() string {
	if k == cudaRegion {
		return "CUDA"
	}
	return "system"
}

// regionKey names a region: its namespace (NamespaceHeader) and its name.
type regionKey struct{ ns, name string }

// shmRegion is one registered region and its mapping.
type shmRegion struct {
	regionKey
	kind regionKind
	size uint64 // bytes, as registered
	// System regions.
	key     string
	offset  uint64 // bytes into the object, as registered
	mapping []byte // what mmap returned: whole pages holding the region
	data    []byte // the region itself, size bytes of mapping
	start   uint64 // offset of mapping[0] in the object (page-aligned)
	objDev  uint64 // the object's device and inode: one object, one namespace
	objIno  uint64
	// CUDA regions: the device as registered, and the memory OpenIPC mapped.
	device int64
	dev    inference.DeviceMemory
	// unregister undoes what the back-end did: a system region's pinning, a
	// CUDA region's mapping.
	unregister func() error

	// Under shmRegistry.mu.
	refs int  // requests holding the region
	gone bool // unregistered: undone when refs drops to 0
}

// shmRegistry holds a Service's shared-memory regions. Its methods are safe
// for concurrent use.
type shmRegistry struct {
	limits SharedMemoryLimits
	access shmAccess
	// pin prepares a new mapping for direct copies (Server.RegisterHost);
	// when it fails, the region is used unprepared and log says why.
	pin func([]byte) (func() error, error)
	// openIPC maps a CUDA region (Server.OpenIPC), or is nil when the
	// server's back-end reads no device memory; backend names that back-end.
	openIPC ipcOpener
	backend string
	log     *slog.Logger

	// regMu serialises registration and unregistration (mapping and pinning
	// take long), so that inference requests, which take only mu, never wait
	// for them.
	regMu sync.Mutex

	mu      sync.Mutex
	byName  map[regionKey]*shmRegion
	regions int   // mapped now, including unregistered ones still in use
	bytes   int64 // their registered sizes
	errs    []error
}

// ipcOpener is Server.OpenIPC's signature.
type ipcOpener = func(handle []byte, device int, size int64) (inference.DeviceMemory, func() error, error)

func newSHMRegistry(limits SharedMemoryLimits, srv *inference.Server, log *slog.Logger) *shmRegistry {
	r := &shmRegistry{limits: limits.withDefaults(), access: newSHMAccess(limits), pin: srv.RegisterHost, backend: srv.BackendName(), log: log, byName: map[regionKey]*shmRegion{}}
	if srv.DeviceIO() {
		r.openIPC = srv.OpenIPC
	}
	return r
}

// enabled reports whether clients may register system regions.
func (r *shmRegistry) enabled() bool { return r.limits.Enabled && shmSupported }

// cudaEnabled reports whether clients may register CUDA regions.
func (r *shmRegistry) cudaEnabled() bool { return r.limits.Enabled && r.openIPC != nil }

// alreadyExists is a name taken: 409, AlreadyExists.
func alreadyExists(format string, args ...any) *Error {
	return &Error{Status: http.StatusConflict, Code: codes.AlreadyExists, Msg: fmt.Sprintf(format, args...)}
}

// checkKey turns a POSIX shared-memory name into the object's file name as
// glibc's shm_open does: leading slashes dropped, and no other slash, no
// "." or "..", nothing empty; the name must start with prefix.
func checkKey(key, prefix string) (string, error) {
	file := strings.TrimLeft(key, "/")
	if file == "" || file == "." || file == ".." || strings.ContainsAny(file, "/\x00") || len(file) > 255 {
		return "", badRequest("shared-memory key %q: want a POSIX shared-memory name, \"/name\" with no other slash", key)
	}
	if !strings.HasPrefix(file, prefix) {
		return "", badRequest("shared-memory key %q: this server maps only objects whose names start with %q (\"/%sname\")", key, prefix, prefix)
	}
	return file, nil
}

// register maps a new system region of namespace ns. The caller checked
// that the call may use the API (shmRegistry.callerHTTP, callerGRPC).
func (r *shmRegistry) register(ns, name, key string, offset, size uint64) error {
	if !r.enabled() {
		return errSystemOff
	}
	if err := checkRegionName(name); err != nil {
		return err
	}
	file, err := checkKey(key, r.limits.KeyPrefix)
	if err != nil {
		return err
	}
	if size == 0 {
		return badRequest("shared-memory region %q: byte_size 0, want at least 1", name)
	}
	r.regMu.Lock()
	defer r.regMu.Unlock()
	id := regionKey{ns, name}
	if err := r.room(id, size); err != nil {
		return err
	}
	reg := &shmRegion{regionKey: id, kind: systemRegion, key: key, offset: offset, size: size}
	if err := mapRegion(reg, r.limits.Dir, file); err != nil {
		return err
	}
	if err := r.ownObject(reg); err != nil {
		return errors.Join(err, unmapRegion(reg))
	}
	if reg.unregister, err = r.pin(reg.mapping); err != nil {
		// The region still works: the back-end copies from it as from any
		// pageable memory (through its staging buffers on CUDA), slower.
		r.log.Warn("shared-memory region registered without page-locking: copies from it go through staging", "region", name, "key", key, "err", err)
		reg.unregister = func() error { return nil }
	}
	r.add(reg)
	return nil
}

// registerCUDA maps a new CUDA region of namespace ns: size bytes of the
// device allocation whose CUDA IPC handle is handle, on the GPU with ordinal
// device. The caller checked that the call may use the API.
func (r *shmRegistry) registerCUDA(ns, name string, handle []byte, device int64, size uint64) error {
	switch {
	case !r.limits.Enabled:
		return errCUDAOff
	case r.openIPC == nil:
		return &Error{Status: http.StatusBadRequest, Code: codes.Unimplemented,
			Msg: fmt.Sprintf("CUDA shared memory needs the cuda back-end, and this server runs %s; use system shared memory (the system_shared_memory extension)", r.backend)}
	}
	if err := checkRegionName(name); err != nil {
		return err
	}
	switch {
	case len(handle) != backend.IPCHandleSize:
		return badRequest("CUDA shared-memory region %q: raw_handle has %d bytes, want %d (a cudaIpcMemHandle_t)", name, len(handle), backend.IPCHandleSize)
	case device < 0 || device > math.MaxInt32:
		return badRequest("CUDA shared-memory region %q: device_id %d, want a GPU's ordinal", name, device)
	case size == 0:
		return badRequest("CUDA shared-memory region %q: byte_size 0, want at least 1", name)
	}
	r.regMu.Lock()
	defer r.regMu.Unlock()
	id := regionKey{ns, name}
	if err := r.room(id, size); err != nil {
		return err
	}
	mem, unmap, err := r.openIPC(handle, int(device), int64(size))
	if err != nil {
		return badRequest("CUDA shared-memory region %q: %v", name, err)
	}
	r.add(&shmRegion{regionKey: id, kind: cudaRegion, size: size, device: device, dev: mem, unregister: unmap})
	return nil
}

// checkRegionName checks a region's name: 1 to 255 bytes, no NUL.
func checkRegionName(name string) error {
	if name == "" || len(name) > 255 || strings.ContainsRune(name, 0) {
		return badRequest("shared-memory region name %q: want 1 to 255 bytes", name)
	}
	return nil
}

// ownObject fails when another namespace has a region of reg's object
// mapped: a client that learnt another's key cannot read its inputs or
// write its outputs through a region of its own. The caller holds regMu.
func (r *shmRegistry) ownObject(reg *shmRegion) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, other := range r.byName {
		if other.kind == systemRegion && other.objDev == reg.objDev && other.objIno == reg.objIno && id.ns != reg.ns {
			return &Error{Status: http.StatusForbidden, Code: codes.PermissionDenied,
				Msg: fmt.Sprintf("shared-memory region %q: object %q is mapped by a region of another namespace (%s header); an object serves one namespace at a time", reg.name, reg.key, NamespaceHeader)}
		}
	}
	return nil
}

// room fails when name is taken in its namespace or a new region of size
// bytes would pass the limits. The caller holds regMu, so nothing registers
// meanwhile.
func (r *shmRegistry) room(id regionKey, size uint64) error {
	name := id.name
	r.mu.Lock()
	old, taken := r.byName[id]
	regions, bytes := r.regions, r.bytes
	r.mu.Unlock()
	switch {
	case taken:
		return alreadyExists("shared-memory region %q is already registered as %s shared memory (unregister it first)", name, old.kind)
	case regions >= r.limits.MaxRegions:
		return &Error{Status: http.StatusBadRequest, Code: codes.ResourceExhausted,
			Msg: fmt.Sprintf("shared-memory region %q: this server maps at most %d regions, and %d are mapped (unregister some)", name, r.limits.MaxRegions, regions)}
	case size > uint64(r.limits.MaxBytes-bytes):
		return &Error{Status: http.StatusBadRequest, Code: codes.ResourceExhausted,
			Msg: fmt.Sprintf("shared-memory region %q: %d bytes would pass this server's limit of %d bytes of regions (%d mapped)", name, size, r.limits.MaxBytes, bytes)}
	}
	return nil
}

// add makes a mapped region known under its name; the caller holds regMu
// and room said yes.
func (r *shmRegistry) add(reg *shmRegion) {
	r.mu.Lock()
	r.byName[reg.regionKey] = reg
	r.regions++
	r.bytes += int64(reg.size)
	r.mu.Unlock()
}

// unregister removes namespace ns's region of kind called name, or every
// region of kind in ns when name is empty. As Triton does, an unknown name,
// or the name of a region of the other kind, is not an error (and leaves it
// alone); so is the name of another namespace's region, which stays. A
// region in use is undone when its last request is answered.
func (r *shmRegistry) unregister(ns, name string, kind regionKind) error {
	return r.unregisterIf(func(reg *shmRegion) bool {
		return reg.ns == ns && (name == "" || reg.name == name) && reg.kind == kind
	})
}

// unregisterIf removes the regions for which match is true.
func (r *shmRegistry) unregisterIf(match func(*shmRegion) bool) error {
	r.regMu.Lock()
	defer r.regMu.Unlock()
	var now []*shmRegion
	r.mu.Lock()
	for n, reg := range r.byName {
		if !match(reg) {
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
	err := reg.unregister()
	if reg.kind == systemRegion {
		err = errors.Join(err, unmapRegion(reg))
	}
	if err != nil {
		err = fmt.Errorf("protocol: unmapping %s shared-memory region %q: %w", reg.kind, reg.name, err)
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

// regionStatus is one region as the status endpoints report it: name and
// byte_size, and key and offset (system) or device_id (CUDA).
type regionStatus struct {
	Name     string
	Key      string
	Offset   uint64
	DeviceID int64
	ByteSize uint64
}

// status lists namespace ns's region of kind called name, or every region
// of kind in ns (by name) when name is empty.
func (r *shmRegistry) status(ns, name string, kind regionKind) ([]regionStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name != "" {
		reg := r.byName[regionKey{ns, name}]
		switch {
		case reg == nil:
			return nil, notFound("unknown %s shared-memory region %q", kind, name)
		case reg.kind != kind:
			return nil, notFound("shared-memory region %q is registered as %s shared memory, not %s shared memory", name, reg.kind, kind)
		}
	}
	var out []regionStatus
	for id, reg := range r.byName {
		if id.ns == ns && (name == "" || id.name == name) && reg.kind == kind {
			out = append(out, regionStatus{Name: id.name, Key: reg.key, Offset: reg.offset, DeviceID: reg.device, ByteSize: reg.size})
		}
	}
	slices.SortFunc(out, func(a, b regionStatus) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// shmRef is a tensor's shared-memory parameters, and the namespace of the
// request that named them (set by Service.shmCaller).
type shmRef struct {
	region       string
	offset, size int64
	ns           string
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

// shmView is what a tensor's shared-memory parameters name: bytes of a
// system region's mapping, or device memory of a CUDA region.
type shmView struct {
	host []byte
	dev  inference.DeviceMemory
}

// acquire returns the memory ref names, holding its region until release is
// called. want is the byte size the tensor needs: the reference's byte size
// must equal it (exact) or hold it (!exact); align is the alignment the data
// needs in host memory (a CUDA region's device to device copies need none).
func (r *shmRegistry) acquire(where string, ref *shmRef, want int64, exact bool, align int) (shmView, *shmRegion, error) {
	switch {
	case exact && ref.size != want:
		return shmView{}, nil, badRequest("%s: %s %d, want %d", where, paramShmByteSize, ref.size, want)
	case !exact && ref.size < want:
		return shmView{}, nil, badRequest("%s: %s %d is too small: the tensor needs %d bytes", where, paramShmByteSize, ref.size, want)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	reg := r.byName[regionKey{ref.ns, ref.region}]
	if reg == nil {
		return shmView{}, nil, notFound("%s: unknown shared-memory region %q (register it first)", where, ref.region)
	}
	if uint64(ref.offset) > reg.size || uint64(ref.size) > reg.size-uint64(ref.offset) {
		return shmView{}, nil, badRequest("%s: %s shared-memory region %q holds %d bytes: %s %d + %s %d runs past its end",
			where, reg.kind, ref.region, reg.size, paramShmOffset, ref.offset, paramShmByteSize, ref.size)
	}
	var v shmView
	if reg.kind == cudaRegion {
		v.dev = reg.dev.Slice(int(ref.offset), int(want))
	} else {
		b := reg.data[ref.offset : ref.offset+want : ref.offset+want]
		if align > 1 && want > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(align) != 0 {
			return shmView{}, nil, badRequest("%s: data at byte %d of shared-memory object %q is not %d-byte aligned, as its elements must be (region offset %d + tensor offset %d)",
				where, reg.offset+uint64(ref.offset), reg.key, align, reg.offset, ref.offset)
		}
		v.host = b
	}
	reg.refs++
	return v, reg, nil
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
	err := r.unregisterIf(func(*shmRegion) bool { return true })
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
