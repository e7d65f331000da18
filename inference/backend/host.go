package backend

// HostRegistrar is implemented by Engines that can prepare host memory they
// did not allocate, such as a shared-memory region a client mapped, so that
// CopyIn copies parts inside it as directly as parts from Allocator.AllocHost
// (on CUDA: page-locked once with cuMemHostRegister, so copy-in is a DMA from
// that memory with no staging copy).
type HostRegistrar interface {
	// RegisterHost prepares p, whole pages of a mapping the caller owns, and
	// returns the function that undoes it. The caller keeps p mapped until
	// unregister has returned, and calls unregister only once no part inside
	// p is being copied (every batch that held such a part was answered).
	// unregister is idempotent and safe to call after the Engine closed
	// (Close undoes what is still registered).
	RegisterHost(p []byte) (unregister func() error, err error)
}
