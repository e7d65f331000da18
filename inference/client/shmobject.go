package client

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// SharedMemoryObject is a POSIX shared-memory object that this process
// created and mapped read-write: the client's side of a system shared-memory
// region. Register it (or part of it) with RegisterSystemSharedMemory under
// its Key; the server maps the same pages, so an input written here is read
// there in place, and an output the server writes here is read here without
// a copy.
//
// Bytes may be read and written from any goroutine; keeping the accesses of
// concurrent requests apart is the caller's business. Close unmaps and
// removes the object.
type SharedMemoryObject struct {
	key  string
	data []byte
	free func() error // unmaps and unlinks; nil once closed
}

// checkSharedMemoryKey checks a key as shm_open names objects: one leading
// slash, then a non-empty name without further slashes.
func checkSharedMemoryKey(key string) (string, error) {
	name, ok := strings.CutPrefix(key, "/")
	if !ok || name == "" || strings.Contains(name, "/") || name == "." || name == ".." || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("client: shared-memory key %q: want \"/name\", one leading slash and no other", key)
	}
	return name, nil
}

// Key is the object's name as shm_open takes it ("/name"), the key to
// register.
func (o *SharedMemoryObject) Key() string { return o.key }

// Bytes is the mapped object, its whole size; nil after Close.
func (o *SharedMemoryObject) Bytes() []byte { return o.data }

// PutFloat32s writes v as little-endian FP32 values (the protocol's byte
// order) at byte offset off.
func (o *SharedMemoryObject) PutFloat32s(off int, v []float32) error {
	if off < 0 || off > len(o.data) || len(v) > (len(o.data)-off)/4 {
		return fmt.Errorf("client: %d FP32 values at offset %d do not fit in shared-memory object %q of %d bytes", len(v), off, o.key, len(o.data))
	}
	b := o.data[off:]
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return nil
}

// Close unmaps the object and removes its name, so no other process can
// open it any more (a server that mapped it keeps its mapping until it
// unregisters the region). Calling Close again does nothing.
func (o *SharedMemoryObject) Close() error {
	if o.free == nil {
		return nil
	}
	err := o.free()
	o.free, o.data = nil, nil
	return err
}
