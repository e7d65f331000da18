// Package half converts between float32 and IEEE 754 binary16 ("half",
// FP16) bit patterns in pure Go: the checkpoint reader widens fp16 tensors,
// the CUDA back-end narrows weights, and the network front door widens FP16
// request tensors.
package half

import "math"

// FromFloat32 rounds f to the nearest IEEE binary16 value (ties to even) and returns
// its bits.
func FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	bexp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if bexp == 0xff { // infinity or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	exp := bexp - 127 + 15
	if exp >= 0x1f {
		return sign | 0x7c00
	}
	if exp <= 0 { // subnormal half (or zero)
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint(14 - exp)
		h := mant >> shift
		rem, halfway := mant&(1<<shift-1), uint32(1)<<(shift-1)
		if rem > halfway || (rem == halfway && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // a carry into the exponent is the correct rounding
	}
	return sign | uint16(h)
}

// ToFloat32 converts IEEE 754 binary16 bits to float32, exactly.
func ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf, NaN
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: mant * 2^-24
		f := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}
