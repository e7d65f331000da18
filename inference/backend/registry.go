package backend

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// modulePath is where this module's back-end packages live: the back-end named
// NAME is the package modulePath + "/inference/" + NAME.
const modulePath = "github.com/inferbench/inferbench"

var registry struct {
	mu       sync.RWMutex
	backends map[string]Backend
}

// Register makes b available to Lookup under b.Name(). Back-end packages call
// it from their init; it must not touch a device. It panics if b is nil, its
// name is empty or already registered.
func Register(b Backend) {
	if b == nil {
		panic("backend: Register of a nil Backend")
	}
	name := b.Name()
	if name == "" {
		panic("backend: Register of a Backend with an empty name")
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if _, dup := registry.backends[name]; dup {
		panic(fmt.Sprintf("backend: Register called twice for %q", name))
	}
	if registry.backends == nil {
		registry.backends = make(map[string]Backend)
	}
	registry.backends[name] = b
}

// Lookup returns the back-end registered as name. A name nobody registered is
// an error that says which package registers it (for this module's back-ends)
// and lists the registered names.
func Lookup(name string) (Backend, error) {
	registry.mu.RLock()
	b, ok := registry.backends[name]
	registry.mu.RUnlock()
	if ok {
		return b, nil
	}
	err := fmt.Errorf("backend: no back-end %q registered (registered: %s)", name, strings.Join(Names(), ", "))
	if slices.Contains(moduleBackends, name) {
		err = fmt.Errorf("%w; import the package that registers it, for this module's: _ %q", err, modulePath+"/inference/"+name)
	}
	return nil, err
}

// moduleBackends are the back-ends this module's packages register, each
// by a package of its name under inference/.
var moduleBackends = []string{"cpu", "cuda", "nop"}

// Names returns the registered back-end names, sorted.
func Names() []string {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	names := make([]string, 0, len(registry.backends))
	for n := range registry.backends {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
