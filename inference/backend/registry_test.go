package backend_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

type named string

func (n named) Name() string { return string(n) }

func (n named) Open(*resnet.Model, backend.Options) (backend.Engine, error) { return nil, nil }

// runs numbers the tests' runs: the registry outlives a run (-count 2), so
// each run registers names of its own.
var runs atomic.Int64

// fresh returns base made unique to this run.
func fresh(base string) string { return fmt.Sprintf("%s-%d", base, runs.Add(1)) }

func TestRegisterAndLookup(t *testing.T) {
	a, b := fresh("registry-test-a"), fresh("registry-test-b")
	backend.Register(named(a))
	backend.Register(named(b))
	for _, name := range []string{a, b} {
		got, err := backend.Lookup(name)
		require.NoError(t, err, "Lookup(%q)", name)
		assert.Equal(t, name, got.Name())
	}
	assert.Subset(t, backend.Names(), []string{a, b})
	assert.IsNonDecreasing(t, backend.Names())
}

func TestLookupUnregisteredNamesThePackage(t *testing.T) {
	_, err := backend.Lookup("cuda")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `no back-end "cuda" registered`)
	assert.Contains(t, err.Error(), `_ "github.com/inferbench/inferbench/inference/cuda"`)
}

func TestRegisterPanics(t *testing.T) {
	dup := fresh("registry-test-dup")
	backend.Register(named(dup))
	tests := []struct {
		name string
		b    backend.Backend
		want string
	}{
		{"nil", nil, "backend: Register of a nil Backend"},
		{"empty name", named(""), "backend: Register of a Backend with an empty name"},
		{"duplicate", named(dup), fmt.Sprintf("backend: Register called twice for %q", dup)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.PanicsWithValue(t, tt.want, func() { backend.Register(tt.b) })
		})
	}
}

func TestUtilizationKindString(t *testing.T) {
	tests := []struct {
		k    backend.UtilizationKind
		want string
	}{
		{backend.NoUtilization, "none"},
		{backend.ProcessCPU, "process-cpu"},
		{backend.GPUUtilization, "gpu"},
		{backend.UtilizationKind(7), "UtilizationKind(7)"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.k.String())
	}
}
