//go:build cuda && linux && cgo

package cudadrv

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The table is looked up under the symbols a program linked against cuda.h
// would call (no GPU needed).
func TestHostRegisterSymbols(t *testing.T) {
	assert.Equal(t, []string{"cuMemHostRegister_v2", "cuMemHostUnregister"}, hostRegisterSymbols())
}
