package protocol

import (
	"fmt"
	"math"
	"strconv"
)

// parseData reads the JSON "data" of an input tensor into dst (one float32
// per element, len(dst) elements) without reflection. The data is either
// flat ([1, 2, 3, 4]) or nested in the tensor's own shape ([[1, 2], [3, 4]]
// for shape [2, 2]), as the protocol allows; any other nesting, a count other
// than len(dst), or a value the datatype cannot hold is an error naming the
// first offending element. FP32 values are rounded once to float32 (so a
// client's float32 printed in its shortest form comes back bit for bit);
// UINT8 values must be integers 0..255 and are normalised with lut.
func parseData(data []byte, datatype string, shape []int64, dst []float32, lut [][256]float32, plane int) error {
	if err := jsonDatatype(datatype); err != nil {
		return err
	}
	p := dataParser{buf: data, datatype: datatype, dst: dst, lut: lut, plane: plane}
	p.skipSpace()
	depth := 0
	for i := p.pos; i < len(data) && (data[i] == '[' || isSpace(data[i])); i++ {
		if data[i] == '[' {
			depth++
		}
	}
	switch depth {
	case 0:
		return fmt.Errorf("data must be a JSON array")
	case 1:
		p.dims = []int64{int64(len(dst))}
	case len(shape):
		p.dims = shape
	default:
		return fmt.Errorf("data nested %d deep: want a flat array or one nested as the shape %v", depth, shape)
	}
	if err := p.array(0); err != nil {
		return err
	}
	p.skipSpace()
	if p.pos != len(data) {
		return fmt.Errorf("unexpected %q after the data array", clip(data[p.pos:]))
	}
	if p.n != len(dst) {
		return fmt.Errorf("data has %d values, shape %v needs %d", p.n, shape, len(dst))
	}
	return nil
}

// jsonDatatype fails for a datatype whose data cannot come as JSON numbers.
func jsonDatatype(datatype string) error {
	if datatype != FP32 && datatype != UINT8 {
		return fmt.Errorf("%s data must be sent as binary (the binary tensor data extension or gRPC raw contents)", datatype)
	}
	return nil
}

type dataParser struct {
	buf      []byte
	pos      int
	datatype string
	dims     []int64 // expected length of the arrays at each depth
	dst      []float32
	n        int // values stored
	lut      [][256]float32
	plane    int
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (p *dataParser) skipSpace() {
	for p.pos < len(p.buf) && isSpace(p.buf[p.pos]) {
		p.pos++
	}
}

// array parses one array at depth d (its '[' is next).
func (p *dataParser) array(d int) error {
	p.skipSpace()
	if p.pos >= len(p.buf) || p.buf[p.pos] != '[' {
		return p.errorf("want '[' at depth %d", d)
	}
	p.pos++
	leaf := d == len(p.dims)-1
	var count int64
	for {
		p.skipSpace()
		if p.pos >= len(p.buf) {
			return p.errorf("unterminated array")
		}
		if p.buf[p.pos] == ']' {
			if count == 0 && p.dims[d] != 0 {
				return p.errorf("empty array at depth %d", d)
			}
			p.pos++
			break
		}
		if count > 0 {
			if p.buf[p.pos] != ',' {
				return p.errorf("want ',' or ']'")
			}
			p.pos++
			p.skipSpace()
		}
		if count == p.dims[d] {
			return p.errorf("array at depth %d longer than %d", d, p.dims[d])
		}
		var err error
		if leaf {
			err = p.value()
		} else {
			err = p.array(d + 1)
		}
		if err != nil {
			return err
		}
		count++
	}
	if count != p.dims[d] {
		return p.errorf("array at depth %d has %d elements, want %d", d, count, p.dims[d])
	}
	return nil
}

// value parses one number into the next element of dst.
func (p *dataParser) value() error {
	start := p.pos
	for p.pos < len(p.buf) {
		c := p.buf[p.pos]
		if c == ',' || c == ']' || isSpace(c) {
			break
		}
		p.pos++
	}
	tok := p.buf[start:p.pos]
	if !isJSONNumber(tok) {
		return fmt.Errorf("element %d: %q is not a JSON number", p.n, clip(tok))
	}
	if p.n >= len(p.dst) {
		return fmt.Errorf("data has more than the %d values of the shape", len(p.dst))
	}
	switch p.datatype {
	case FP32:
		f, err := strconv.ParseFloat(string(tok), 32)
		if err != nil {
			return fmt.Errorf("element %d: %q does not fit FP32", p.n, clip(tok))
		}
		p.dst[p.n] = float32(f)
	case UINT8:
		f, err := strconv.ParseFloat(string(tok), 64)
		if err != nil || f != math.Trunc(f) || f < 0 || f > 255 {
			return fmt.Errorf("element %d: %q is not a UINT8 (an integer 0..255)", p.n, clip(tok))
		}
		c := (p.n / p.plane) % len(p.lut)
		p.dst[p.n] = p.lut[c][int(f)]
	}
	p.n++
	return nil
}

// isJSONNumber reports whether tok is a number in JSON's grammar
// (-?int frac? exp?), which rules out NaN, Infinity, hex and leading '+'.
func isJSONNumber(tok []byte) bool {
	i := 0
	if i < len(tok) && tok[i] == '-' {
		i++
	}
	digits := func() int {
		s := i
		for i < len(tok) && tok[i] >= '0' && tok[i] <= '9' {
			i++
		}
		return i - s
	}
	if i < len(tok) && tok[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(tok) && tok[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(tok) && (tok[i] == 'e' || tok[i] == 'E') {
		i++
		if i < len(tok) && (tok[i] == '+' || tok[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(tok)
}

func (p *dataParser) errorf(format string, args ...any) error {
	return fmt.Errorf("data at byte %d: %s", p.pos, fmt.Sprintf(format, args...))
}

// clip shortens b for an error message.
func clip(b []byte) string {
	if len(b) > 24 {
		return string(b[:24]) + "..."
	}
	return string(b)
}
