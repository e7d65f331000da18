package half

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFromFloat32(t *testing.T) {
	tests := []struct {
		name string
		in   float32
		want uint16
	}{
		{"zero", 0, 0x0000},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
		{"one", 1, 0x3c00},
		{"minus two", -2, 0xc000},
		{"one third", 1.0 / 3, 0x3555},
		{"largest", 65504, 0x7bff},
		{"overflow", 65520, 0x7c00},
		{"infinity", float32(math.Inf(1)), 0x7c00},
		{"NaN", float32(math.NaN()), 0x7e00},
		{"smallest normal", 6.103515625e-05, 0x0400},
		{"smallest subnormal", 5.960464477539063e-08, 0x0001},
		{"half of smallest subnormal rounds to even zero", 2.9802322387695312e-08, 0x0000},
		{"tie rounds to even", 1 + 1.0/2048, 0x3c00},
		{"above tie rounds up", 1 + 1.0/2048 + 1.0/65536, 0x3c01},
		{"too small", 1e-10, 0x0000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, FromFloat32(tt.in), "FromFloat32(%g)", tt.in)
		})
	}
}

func TestToFloat32RoundTripsEveryHalf(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := ToFloat32(uint16(h))
		if math.IsNaN(float64(f)) {
			assert.True(t, h&0x7c00 == 0x7c00 && h&0x3ff != 0, "ToFloat32(%#04x) = NaN", h)
			continue
		}
		if back := FromFloat32(f); back != uint16(h) {
			t.Fatalf("FromFloat32(ToFloat32(%#04x)) = %#04x (via %g)", h, back, f)
		}
	}
}

func TestToFloat32(t *testing.T) {
	tests := []struct {
		bits uint16
		want float32
	}{
		{0x0000, 0}, {0x3c00, 1}, {0xc000, -2}, {0x3555, 0.333251953125}, {0x7bff, 65504},
		{0x0001, 5.960464477539063e-08}, {0x03ff, 6.097555160522461e-05}, {0x0400, 6.103515625e-05},
		{0x7c00, float32(math.Inf(1))}, {0xfc00, float32(math.Inf(-1))}, {0x8001, -5.960464477539063e-08},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, ToFloat32(tt.bits), "ToFloat32(%#04x)", tt.bits)
	}
	assert.True(t, math.IsNaN(float64(ToFloat32(0x7e00))), "ToFloat32(0x7e00) is NaN")
	assert.Equal(t, math.Float32bits(float32(math.Copysign(0, -1))), math.Float32bits(ToFloat32(0x8000)), "ToFloat32(0x8000) = -0")
}
