package cuda

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/switches"
)

func TestAlgoCacheRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "algos.json")
	c, err := loadAlgoCache(path)
	require.NoError(t, err)
	_, ok := c.get("k")
	assert.False(t, ok, "empty cache")
	want := cachedAlgo{Algo: 1, Math: 3, Workspace: 4096, Fused: true}
	c.put("k", want)
	require.NoError(t, c.save())

	d, err := loadAlgoCache(path)
	require.NoError(t, err)
	got, ok := d.get("k")
	require.True(t, ok, "entry after reload")
	assert.Equal(t, want, got)
	require.NoError(t, d.save(), "save of an unchanged cache")
}

func TestAlgoCacheBadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "algos.json")
	require.NoError(t, os.WriteFile(path, []byte("{not json"), 0o644))
	c, err := loadAlgoCache(path)
	assert.Error(t, err)
	require.NotNil(t, c, "a usable empty cache despite the error")
	c.put("k", cachedAlgo{Algo: 2})
	require.NoError(t, c.save(), "a bad file is replaced")
}

func TestAlgoCacheNil(t *testing.T) {
	c, err := loadAlgoCache("")
	require.NoError(t, err)
	assert.Nil(t, c)
	c.put("k", cachedAlgo{})
	_, ok := c.get("k")
	assert.False(t, ok)
	assert.NoError(t, c.save())
}

func TestCachePath(t *testing.T) {
	tests := []struct {
		name, option, env string
		want              func(string) bool
	}{
		{"option off", "off", "/tmp/env.json", func(p string) bool { return p == "" }},
		{"option path", "/tmp/x.json", "/tmp/env.json", func(p string) bool { return p == "/tmp/x.json" }},
		{"env off", "", "off", func(p string) bool { return p == "" }},
		{"env path", "", "/tmp/env.json", func(p string) bool { return p == "/tmp/env.json" }},
		{"default", "", "", func(p string) bool { return p == "" || filepath.Base(p) == "cudnn-algorithms.json" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(switches.CUDNNCache.Name, tt.env)
			p := cachePath(tt.option)
			assert.True(t, tt.want(p), "cachePath(%q) with %s=%q = %q", tt.option, switches.CUDNNCache.Name, tt.env, p)
		})
	}
}

func TestCacheUseConfig(t *testing.T) {
	tests := []struct {
		name string
		use  cacheUse
		want []backend.KV
	}{
		{"off", cacheUse{misses: 20}, []backend.KV{
			{Key: "cudnn-algo-cache", Value: "off hits=0 misses=20"}, {Key: "cudnn-algo-cache-file", Value: "none"}}},
		{"cold", cacheUse{path: "/c.json", misses: 20}, []backend.KV{
			{Key: "cudnn-algo-cache", Value: "cold hits=0 misses=20"}, {Key: "cudnn-algo-cache-file", Value: "/c.json"}}},
		{"warm", cacheUse{path: "/c.json", hits: 20}, []backend.KV{
			{Key: "cudnn-algo-cache", Value: "warm hits=20 misses=0"}, {Key: "cudnn-algo-cache-file", Value: "/c.json"}}},
		{"partial, with an error", cacheUse{path: "/c.json", hits: 12, misses: 8, err: errors.New("disk full")}, []backend.KV{
			{Key: "cudnn-algo-cache", Value: "partial hits=12 misses=8"}, {Key: "cudnn-algo-cache-file", Value: "/c.json"},
			{Key: "cudnn-algo-cache-error", Value: "disk full"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.use.config())
		})
	}
}
