package cuda

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		name, env string
		want      func(string) bool
	}{
		{"off", "off", func(p string) bool { return p == "" }},
		{"explicit", "/tmp/x.json", func(p string) bool { return p == "/tmp/x.json" }},
		{"default", "", func(p string) bool { return p == "" || filepath.Base(p) == "cudnn-algorithms.json" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(CacheEnv, tt.env)
			p := cachePath()
			assert.True(t, tt.want(p), "cachePath() = %q", p)
		})
	}
}
