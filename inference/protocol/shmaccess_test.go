package protocol_test

import "github.com/inferbench/inferbench/inference/protocol"

// shmOn is the options of a fixture with the shared-memory API on.
func shmOn() fixtureOpts {
	return fixtureOpts{opts: protocol.Options{SharedMemory: protocol.SharedMemoryLimits{Enabled: true}}}
}
