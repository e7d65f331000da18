package cuda

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/inferbench/inferbench/inference/internal/switches"

	"github.com/inferbench/inferbench/inference/backend"
)

// CacheEnv is the name of the environment variable that sets the algorithm
// cache file (switches.CUDNNCache), for programs outside this module's tree
// that start servers.
var CacheEnv = switches.CUDNNCache.Name

// cachedAlgo is a chosen convolution algorithm as stored in the cache file.
type cachedAlgo struct {
	Algo      int    `json:"algo"`
	Math      int    `json:"math"`
	Workspace uint64 `json:"workspace"`
	Fused     bool   `json:"fused"`
	// A graph decision (backend.ConvsGraph) records whether a backend-API
	// plan beat the legacy call and, if so, its rank in the heuristics' list
	// and its engine's global index.
	Graph  bool  `json:"graph,omitempty"`
	Rank   int   `json:"rank,omitempty"`
	Engine int64 `json:"engine,omitempty"`
}

// cacheFile is the layout of the cache file.
type cacheFile struct {
	Version int                   `json:"version"`
	Entries map[string]cachedAlgo `json:"entries"`
}

const cacheVersion = 1

// algoCache remembers measured algorithm choices across processes, keyed by GPU,
// cuDNN version, precision and convolution shape. It is safe for concurrent use.
type algoCache struct {
	path string

	mu    sync.Mutex
	m     map[string]cachedAlgo
	dirty bool
}

// cachePath returns the cache file for backend.Options.AlgoCache option, or ""
// when caching is off (option "off"; or option "" with switches.CUDNNCache
// "off", or with it unset too and no user cache directory). Where both are
// unset, the cache is inferbench/cudnn-algorithms.json under
// os.UserCacheDir.
func cachePath(option string) string {
	p := option
	if p == "" {
		p = switches.CUDNNCache.Value()
	}
	switch p {
	case "off":
		return ""
	case "":
		dir, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		return filepath.Join(dir, "inferbench", "cudnn-algorithms.json")
	}
	return p
}

// cacheUse is what one Open did with the algorithm cache.
type cacheUse struct {
	path   string // the cache file; "" when caching is off
	hits   int    // distinct convolution problems whose algorithm the cache held
	misses int    // distinct convolution problems searched
	err    error  // why the file could not be read or written
}

// config returns the config lines that keep cold and warm starts apart:
//
//	cudnn-algo-cache: STATE hits=H misses=M
//	cudnn-algo-cache-file: PATH (or none)
//	cudnn-algo-cache-error: ERROR (only when there was one)
//
// STATE is off (no cache: every problem searched), cold (nothing found), warm
// (everything found) or partial.
func (u cacheUse) config() []backend.KV {
	state := "partial"
	switch {
	case u.path == "":
		state = "off"
	case u.misses == 0:
		state = "warm"
	case u.hits == 0:
		state = "cold"
	}
	file := u.path
	if file == "" {
		file = "none"
	}
	kv := []backend.KV{
		{Key: "cudnn-algo-cache", Value: fmt.Sprintf("%s hits=%d misses=%d", state, u.hits, u.misses)},
		{Key: "cudnn-algo-cache-file", Value: file},
	}
	if u.err != nil {
		kv = append(kv, backend.KV{Key: "cudnn-algo-cache-error", Value: u.err.Error()})
	}
	return kv
}

// loadAlgoCache reads the cache at path; a missing or unreadable file gives an
// empty cache (the error says why it was unreadable). path "" gives nil.
func loadAlgoCache(path string) (*algoCache, error) {
	if path == "" {
		return nil, nil
	}
	c := &algoCache{path: path, m: map[string]cachedAlgo{}}
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("cuda: algorithm cache: %w", err)
	}
	var f cacheFile
	if err := json.Unmarshal(raw, &f); err != nil || f.Version != cacheVersion {
		return c, fmt.Errorf("cuda: algorithm cache %s: unreadable or old (%v), starting afresh", path, err)
	}
	for k, v := range f.Entries {
		c.m[k] = v
	}
	return c, nil
}

func (c *algoCache) get(key string) (cachedAlgo, bool) {
	if c == nil {
		return cachedAlgo{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[key]
	return v, ok
}

func (c *algoCache) put(key string, v cachedAlgo) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[key]; !ok || old != v {
		c.m[key] = v
		c.dirty = true
	}
}

// save writes the cache if it changed, atomically (a temporary file renamed).
func (c *algoCache) save() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.dirty {
		return nil
	}
	raw, err := json.MarshalIndent(cacheFile{Version: cacheVersion, Entries: c.m}, "", " ")
	if err != nil {
		return fmt.Errorf("cuda: algorithm cache: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
		return fmt.Errorf("cuda: algorithm cache: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(c.path), ".cudnn-algorithms-*")
	if err != nil {
		return fmt.Errorf("cuda: algorithm cache: %w", err)
	}
	_, werr := tmp.Write(raw)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("cuda: algorithm cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), c.path); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("cuda: algorithm cache: %w", err)
	}
	c.dirty = false
	return nil
}
