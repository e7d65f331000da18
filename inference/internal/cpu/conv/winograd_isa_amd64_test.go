package conv

import (
	"testing"

	"golang.org/x/sys/cpu"
)

// withWinoISAs runs f as a subtest for each instruction set the assembly
// transforms can use on this CPU: AVX-512, then AVX2.
func withWinoISAs(t *testing.T, f func(t *testing.T)) {
	old := winoAVX512
	defer func() { winoAVX512 = old }()
	if cpu.X86.HasAVX512F {
		winoAVX512 = true
		t.Run("avx512", f)
	}
	if cpu.X86.HasAVX2 {
		winoAVX512 = false
		t.Run("avx2", f)
	}
}
