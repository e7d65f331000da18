//go:build linux

package protocol

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
)

// shmSupported: POSIX shared-memory objects are files under /dev/shm.
const shmSupported = true

// mapRegion opens the object file in dir and maps the pages that hold reg
// (reg.offset, reg.size), filling reg's mapping, start and data.
func mapRegion(reg *shmRegion, dir, file string) error {
	path := filepath.Join(dir, file)
	// O_NOFOLLOW: a key names an object, never a symbolic link to some other
	// file the server could open. O_NONBLOCK: opening a FIFO does not wait
	// for a writer (fstat below refuses it).
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return badRequest("shared-memory region %q: key %q: no such shared-memory object (%s)", reg.name, reg.key, path)
		}
		return badRequest("shared-memory region %q: key %q: opening %s read-write: %v", reg.name, reg.key, path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return badRequest("shared-memory region %q: key %q: %v", reg.name, reg.key, err)
	}
	// Only an object made for the server: a regular file (not a device, a
	// FIFO or a directory), of the server's own user, with no other name (a
	// hard link would let a key reach an object that lacks the prefix).
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return badRequest("shared-memory region %q: key %q is not a shared-memory object (%s is not a regular file)", reg.name, reg.key, path)
	case st.Uid != uint32(os.Geteuid()):
		return badRequest("shared-memory region %q: object %q belongs to user %d; this server maps only objects of its own user (%d)", reg.name, reg.key, st.Uid, os.Geteuid())
	case st.Nlink != 1:
		return badRequest("shared-memory region %q: object %q has %d names (hard links); this server maps only objects with one", reg.name, reg.key, st.Nlink)
	}
	reg.objDev, reg.objIno = uint64(st.Dev), uint64(st.Ino)
	objSize := uint64(st.Size)
	if reg.offset > objSize || reg.size > objSize-reg.offset {
		return badRequest("shared-memory region %q: object %q holds %d bytes: offset %d + byte_size %d runs past its end", reg.name, reg.key, objSize, reg.offset, reg.size)
	}
	page := uint64(os.Getpagesize())
	reg.start = reg.offset / page * page
	length := reg.offset - reg.start + reg.size
	if length > uint64(int(^uint(0)>>1)) {
		return badRequest("shared-memory region %q: %d bytes cannot be mapped", reg.name, reg.size)
	}
	m, err := unix.Mmap(fd, int64(reg.start), int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return &Error{Status: http.StatusInternalServerError, Code: codes.Internal, Msg: fmt.Sprintf("shared-memory region %q: mapping %d bytes of %q: %v", reg.name, length, reg.key, err)}
	}
	reg.mapping = m
	reg.data = m[reg.offset-reg.start:][:reg.size:reg.size]
	return nil
}

// unmapRegion undoes mapRegion.
func unmapRegion(reg *shmRegion) error {
	if reg.mapping == nil {
		return nil
	}
	err := unix.Munmap(reg.mapping)
	reg.mapping, reg.data = nil, nil
	return err
}
