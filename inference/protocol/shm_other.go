//go:build !linux

package protocol

// shmSupported: this build has no POSIX shared-memory objects under /dev/shm.
const shmSupported = false

func mapRegion(reg *shmRegion, dir, file string) error {
	return badRequest("shared-memory region %q: system shared memory needs Linux", reg.name)
}

func unmapRegion(reg *shmRegion) error { return nil }
