package backend_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

type named string

func (n named) Name() string { return string(n) }

func (n named) Open(*resnet.Model, backend.Options) (backend.Engine, error) { return nil, nil }

func TestRegisterAndLookup(t *testing.T) {
	backend.Register(named("registry-test-a"))
	backend.Register(named("registry-test-b"))
	for _, name := range []string{"registry-test-a", "registry-test-b"} {
		b, err := backend.Lookup(name)
		require.NoError(t, err, "Lookup(%q)", name)
		assert.Equal(t, name, b.Name())
	}
	assert.Subset(t, backend.Names(), []string{"registry-test-a", "registry-test-b"})
	assert.IsNonDecreasing(t, backend.Names())
}

func TestLookupUnregisteredNamesThePackage(t *testing.T) {
	_, err := backend.Lookup("cuda")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `no back-end "cuda" registered`)
	assert.Contains(t, err.Error(), `_ "github.com/inferbench/inferbench/inference/cuda"`)
}

func TestRegisterPanics(t *testing.T) {
	backend.Register(named("registry-test-dup"))
	tests := []struct {
		name string
		b    backend.Backend
		want string
	}{
		{"nil", nil, "backend: Register of a nil Backend"},
		{"empty name", named(""), "backend: Register of a Backend with an empty name"},
		{"duplicate", named("registry-test-dup"), `backend: Register called twice for "registry-test-dup"`},
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
