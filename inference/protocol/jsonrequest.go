package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// requestDecoder decodes the JSON object of an HTTP inference request into an
// inferRequestJSON without reflection, reading the body only as far as it
// parses, and counting as it goes against RequestLimits: inputs, outputs,
// parameters (of the request and of each tensor), shape dimensions, the id's
// and every other string's length (numbers count as strings), and nesting. It
// stops at the first count over a bound, so a request costs memory in
// proportion to the bytes it sent up to there, never to what it declares.
//
// Field names match as encoding/json's do (case-insensitively); a known field
// given twice is an error; unknown fields are skipped, their values bounded
// like the rest. Parameter values must be booleans, numbers (kept as
// json.Number), strings or null, as the protocol defines them. An input's
// "data" is not parsed here: its brackets and strings are checked while it
// is skipped, and the bytes it took become inputJSON.Data for parseData.
type requestDecoder struct {
	r     io.Reader
	buf   []byte // every byte read so far: offsets into it stay valid as it grows
	pos   int    // the next byte to parse
	rerr  error  // the reader's error, once it returned one (io.EOF at the end)
	hint  int64  // the most bytes r holds, if positive
	tail  int64  // bytes read after the object, not kept in buf
	lim   RequestLimits
	depth int
}

// readChunk is the least room requestDecoder keeps for a read: the buffer
// grows, by doubling, only as bytes arrive.
const readChunk = 4 << 10

// decodeRequest decodes one request object from r, then checks that only
// white space follows until r ends, and returns it with the number of bytes
// read. sizeHint, if positive, is the number of bytes r holds at most: the
// buffer, which grows as bytes arrive, never grows past it.
func decodeRequest(r io.Reader, sizeHint int64, lim RequestLimits) (*inferRequestJSON, int64, error) {
	size := int64(readChunk)
	if sizeHint > 0 && sizeHint < size {
		size = sizeHint + 1 // room to read the end of r without growing
	}
	d := &requestDecoder{r: r, buf: make([]byte, 0, size), hint: sizeHint, lim: lim}
	var j inferRequestJSON
	var data [][2]int // each input's data span in buf
	if err := d.request(&j, &data); err != nil {
		return nil, 0, err
	}
	if err := d.end(); err != nil {
		return nil, 0, err
	}
	for i, s := range data {
		if s[1] > s[0] {
			j.Inputs[i].Data = d.buf[s[0]:s[1]:s[1]]
		}
	}
	return &j, int64(len(d.buf)) + d.tail, nil
}

// more reads at least one more byte into buf, growing it when it has less
// than readChunk bytes of room. It returns false at the end of r or on a
// read error (kept in rerr).
func (d *requestDecoder) more() bool {
	for d.rerr == nil {
		if cap(d.buf)-len(d.buf) < readChunk {
			size := max(2*cap(d.buf), len(d.buf)+readChunk)
			if d.hint > 0 {
				// Doubling past the end of the body is no use.
				size = min(size, max(int(d.hint)+1, len(d.buf)+readChunk))
			}
			nb := make([]byte, len(d.buf), size)
			copy(nb, d.buf)
			d.buf = nb
		}
		n, err := d.r.Read(d.buf[len(d.buf):cap(d.buf)])
		d.buf = d.buf[:len(d.buf)+n]
		d.rerr = err
		if n > 0 {
			return true
		}
	}
	return false
}

// ended is the error of a request whose body ended or failed inside its JSON.
func (d *requestDecoder) ended() error {
	if d.rerr != nil && d.rerr != io.EOF {
		return readError(d.rerr)
	}
	return d.errorf("the JSON ends early")
}

func (d *requestDecoder) errorf(format string, args ...any) error {
	return badRequest("invalid inference request JSON at byte %d: %s", d.pos, fmt.Sprintf(format, args...))
}

// peek skips white space and returns the next byte without consuming it.
func (d *requestDecoder) peek() (byte, error) {
	for {
		for ; d.pos < len(d.buf); d.pos++ {
			if c := d.buf[d.pos]; !isSpace(c) {
				return c, nil
			}
		}
		if !d.more() {
			return 0, d.ended()
		}
	}
}

// expect consumes the byte c, after white space.
func (d *requestDecoder) expect(c byte) error {
	got, err := d.peek()
	if err != nil {
		return err
	}
	if got != c {
		return d.errorf("want %q, found %q", c, got)
	}
	d.pos++
	return nil
}

// nest enters an array or object, counting its depth against MaxDepth.
func (d *requestDecoder) nest() error {
	d.depth++
	if d.depth > d.lim.MaxDepth {
		return overLimit("levels of nesting", d.lim.MaxDepth)
	}
	return nil
}

// object parses an object whose '{' is next, calling field for each key with
// the value next. A positive maxKeys bounds its keys: overLimit(what, maxKeys).
func (d *requestDecoder) object(maxKeys int, what string, field func(key string) error) error {
	return d.sequence('{', '}', "an object", maxKeys, what, func(int) error {
		key, err := d.str(d.lim.MaxStringBytes, "bytes in a string")
		if err != nil {
			return err
		}
		if err := d.expect(':'); err != nil {
			return err
		}
		return field(key)
	})
}

// array parses an array whose '[' is next, calling elem for each element
// with it next. A positive maxElems bounds its elements: overLimit(what,
// maxElems).
func (d *requestDecoder) array(maxElems int, what string, elem func(i int) error) error {
	return d.sequence('[', ']', "an array", maxElems, what, elem)
}

// sequence parses the comma-separated items between open (next) and close,
// one nesting level deeper, calling item for the n-th with it next; a
// positive max bounds the items: overLimit(what, max).
func (d *requestDecoder) sequence(open, close byte, kind string, max int, what string, item func(n int) error) error {
	if err := d.expect(open); err != nil {
		return err
	}
	if err := d.nest(); err != nil {
		return err
	}
	for n := 0; ; n++ {
		c, err := d.peek()
		if err != nil {
			return err
		}
		if c == close && n == 0 {
			break
		}
		if n > 0 {
			if c == close {
				break
			}
			if c != ',' {
				return d.errorf("want ',' or '%c' in %s, found %q", close, kind, c)
			}
			d.pos++
		}
		if max > 0 && n >= max {
			return overLimit(what, max)
		}
		if err := item(n); err != nil {
			return err
		}
	}
	d.pos++
	d.depth--
	return nil
}

// rawString consumes the string whose '"' is next and returns its offsets in
// buf, quotes included, and whether it has escapes or non-ASCII bytes. Its
// decoded length is at most max, so a longer raw form (an escape takes at
// most six bytes for one) is overLimit(what, max) at once.
func (d *requestDecoder) rawString(max int, what string) (start, end int, plain bool, err error) {
	if err := d.expect('"'); err != nil {
		return 0, 0, false, err
	}
	start, plain = d.pos-1, true
	for i := d.pos; ; i++ {
		if i == len(d.buf) && !d.more() {
			d.pos = i
			return 0, 0, false, d.ended()
		}
		if i-start > 6*max+2 {
			return 0, 0, false, overLimit(what, max)
		}
		switch c := d.buf[i]; {
		case c == '"':
			d.pos = i + 1
			return start, i + 1, plain, nil
		case c == '\\':
			plain = false
			n := 1 // bytes after the backslash: one, or u and four hex digits
			for k := 1; k <= n; k++ {
				if i+k == len(d.buf) && !d.more() {
					d.pos = i + k
					return 0, 0, false, d.ended()
				}
				e := d.buf[i+k]
				switch {
				case k == 1 && e == 'u':
					n = 5
				case k == 1 && strings.IndexByte(`"\/bfnrt`, e) >= 0:
				case k > 1 && (e >= '0' && e <= '9' || e|0x20 >= 'a' && e|0x20 <= 'f'):
				default:
					d.pos = i
					return 0, 0, false, d.errorf("invalid escape in a string")
				}
			}
			i += n
		case c < 0x20:
			d.pos = i
			return 0, 0, false, d.errorf("control character %#x in a string", c)
		case c >= utf8.RuneSelf:
			plain = false
		}
	}
}

// str consumes a string, decoded, of at most max bytes.
func (d *requestDecoder) str(max int, what string) (string, error) {
	start, end, plain, err := d.rawString(max, what)
	if err != nil {
		return "", err
	}
	raw := d.buf[start:end]
	if plain {
		if len(raw)-2 > max {
			return "", overLimit(what, max)
		}
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", badRequest("invalid inference request JSON at byte %d: %v", start, err)
	}
	if len(s) > max {
		return "", overLimit(what, max)
	}
	return s, nil
}

// number consumes a JSON number, of at most MaxStringBytes bytes.
func (d *requestDecoder) number() ([]byte, error) {
	if _, err := d.peek(); err != nil {
		return nil, err
	}
	start := d.pos
	for i := d.pos; ; i++ {
		if i == len(d.buf) && !d.more() {
			if d.rerr != io.EOF {
				return nil, d.ended()
			}
			d.pos = i
			break
		}
		if i-start > d.lim.MaxStringBytes {
			return nil, overLimit("bytes in a number", d.lim.MaxStringBytes)
		}
		if c := d.buf[i]; !(c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
			d.pos = i
			break
		}
	}
	tok := d.buf[start:d.pos]
	if !isJSONNumber(tok) {
		d.pos = start
		return nil, d.errorf("want a value, found %q", clip(tok))
	}
	return tok, nil
}

// literal consumes true, false or null.
func (d *requestDecoder) literal() (any, error) {
	c, err := d.peek()
	if err != nil {
		return nil, err
	}
	var word string
	var v any
	switch c {
	case 't':
		word, v = "true", true
	case 'f':
		word, v = "false", false
	case 'n':
		word = "null"
	default:
		return nil, d.errorf("want a value, found %q", c)
	}
	for len(d.buf)-d.pos < len(word) {
		if !d.more() {
			if d.rerr != io.EOF {
				return nil, d.ended()
			}
			break
		}
	}
	if !bytes.HasPrefix(d.buf[d.pos:], []byte(word)) {
		return nil, d.errorf("want %s", word)
	}
	d.pos += len(word)
	return v, nil
}

// null consumes a null if one is next.
func (d *requestDecoder) null() (bool, error) {
	c, err := d.peek()
	if err != nil || c != 'n' {
		return false, err
	}
	_, err = d.literal()
	return err == nil, err
}

// skip consumes any value, bounded like the rest.
func (d *requestDecoder) skip() error {
	c, err := d.peek()
	if err != nil {
		return err
	}
	switch {
	case c == '{':
		return d.object(0, "", func(string) error { return d.skip() })
	case c == '[':
		return d.array(0, "", func(int) error { return d.skip() })
	case c == '"':
		_, _, _, err = d.rawString(d.lim.MaxStringBytes, "bytes in a string")
	case c == '-' || c >= '0' && c <= '9':
		_, err = d.number()
	default:
		_, err = d.literal()
	}
	return err
}

// dataSpecial marks the bytes skipData stops at inside a data array.
var dataSpecial = [256]bool{'[': true, ']': true, '"': true, '{': true, '}': true}

// skipData consumes an input's data and returns its offsets in buf. An array
// is skipped fast, checking only its brackets, its depth and its strings
// (parseData checks its numbers and separators); anything else is skipped as
// any value (parseData refuses it).
func (d *requestDecoder) skipData() (start, end int, err error) {
	c, err := d.peek()
	if err != nil {
		return 0, 0, err
	}
	start = d.pos
	if c != '[' {
		err = d.skip()
		return start, d.pos, err
	}
	outer := d.depth
	for i := d.pos; ; {
		for i < len(d.buf) && !dataSpecial[d.buf[i]] {
			i++
		}
		if i == len(d.buf) {
			if !d.more() {
				d.pos = i
				return 0, 0, d.ended()
			}
			continue
		}
		d.pos = i
		switch d.buf[i] {
		case '[':
			if err := d.nest(); err != nil {
				return 0, 0, err
			}
		case ']':
			d.depth--
			if d.depth == outer {
				d.pos = i + 1
				return start, d.pos, nil
			}
		case '"':
			if _, _, _, err := d.rawString(d.lim.MaxStringBytes, "bytes in a string"); err != nil {
				return 0, 0, err
			}
			i = d.pos
			continue
		default:
			return 0, 0, d.errorf("an object inside tensor data")
		}
		i++
	}
}

// fields tells which of an object's known fields were seen.
type fields uint32

// match returns the index in names of key (compared as encoding/json
// compares field names), or -1, and fails on a field seen before.
func (d *requestDecoder) match(seen *fields, key string, names ...string) (int, error) {
	for i, n := range names {
		if key == n || strings.EqualFold(key, n) {
			if *seen&(1<<i) != 0 {
				return 0, d.errorf("field %q given twice", n)
			}
			*seen |= 1 << i
			return i, nil
		}
	}
	return -1, nil
}

// request parses the request object; data gets each input's data span.
func (d *requestDecoder) request(j *inferRequestJSON, data *[][2]int) error {
	var seen fields
	return d.object(0, "", func(key string) error {
		f, err := d.match(&seen, key, "id", "parameters", "inputs", "outputs")
		if err != nil {
			return err
		}
		switch f {
		case 0:
			if null, err := d.null(); null || err != nil {
				return err
			}
			j.ID, err = d.str(d.lim.MaxIDBytes, "bytes in its id")
			return err
		case 1:
			return d.params(&j.Parameters)
		case 2:
			if null, err := d.null(); null || err != nil {
				return err
			}
			j.Inputs = []inputJSON{}
			return d.array(d.lim.MaxInputs, "inputs", func(int) error {
				j.Inputs = append(j.Inputs, inputJSON{})
				*data = append(*data, [2]int{})
				return d.input(&j.Inputs[len(j.Inputs)-1], &(*data)[len(*data)-1])
			})
		case 3:
			if null, err := d.null(); null || err != nil {
				return err
			}
			j.Outputs = []outputJSON{}
			return d.array(d.lim.MaxOutputs, "outputs", func(int) error {
				j.Outputs = append(j.Outputs, outputJSON{})
				return d.output(&j.Outputs[len(j.Outputs)-1])
			})
		}
		return d.skip()
	})
}

// nullableStr parses a string or null (which leaves *s as it is).
func (d *requestDecoder) nullableStr(s *string) error {
	if null, err := d.null(); null || err != nil {
		return err
	}
	v, err := d.str(d.lim.MaxStringBytes, "bytes in a string")
	*s = v
	return err
}

func (d *requestDecoder) input(in *inputJSON, data *[2]int) error {
	if null, err := d.null(); null || err != nil {
		return err
	}
	var seen fields
	return d.object(0, "", func(key string) error {
		f, err := d.match(&seen, key, "name", "shape", "datatype", "parameters", "data")
		if err != nil {
			return err
		}
		switch f {
		case 0:
			return d.nullableStr(&in.Name)
		case 1:
			return d.shape(&in.Shape)
		case 2:
			return d.nullableStr(&in.Datatype)
		case 3:
			return d.params(&in.Parameters)
		case 4:
			data[0], data[1], err = d.skipData()
			return err
		}
		return d.skip()
	})
}

func (d *requestDecoder) output(o *outputJSON) error {
	if null, err := d.null(); null || err != nil {
		return err
	}
	var seen fields
	return d.object(0, "", func(key string) error {
		f, err := d.match(&seen, key, "name", "parameters")
		if err != nil {
			return err
		}
		switch f {
		case 0:
			return d.nullableStr(&o.Name)
		case 1:
			return d.params(&o.Parameters)
		}
		return d.skip()
	})
}

// shape parses an array of at most MaxShapeDims integers, or null.
func (d *requestDecoder) shape(s *[]int64) error {
	if null, err := d.null(); null || err != nil {
		return err
	}
	*s = []int64{}
	return d.array(d.lim.MaxShapeDims, "dimensions in a shape", func(int) error {
		c, err := d.peek()
		if err != nil {
			return err
		}
		if c != '-' && (c < '0' || c > '9') {
			return d.errorf("shape: want an integer, found %q", c)
		}
		tok, err := d.number()
		if err != nil {
			return err
		}
		v, err := strconv.ParseInt(string(tok), 10, 64)
		if err != nil {
			return d.errorf("shape: %q is not a 64-bit integer", clip(tok))
		}
		*s = append(*s, v)
		return nil
	})
}

// params parses a parameters object of at most MaxParameters keys, or null.
// A key given twice keeps its last value, as encoding/json does.
func (d *requestDecoder) params(p *params) error {
	if null, err := d.null(); null || err != nil {
		return err
	}
	if *p == nil {
		*p = params{}
	}
	return d.object(d.lim.MaxParameters, "parameters", func(key string) error {
		c, err := d.peek()
		if err != nil {
			return err
		}
		var v any
		switch {
		case c == '"':
			v, err = d.str(d.lim.MaxStringBytes, "bytes in a string")
		case c == '-' || c >= '0' && c <= '9':
			var tok []byte
			tok, err = d.number()
			v = json.Number(tok)
		case c == '{' || c == '[':
			return d.errorf("parameter %q: want a boolean, number or string", key)
		default:
			v, err = d.literal()
		}
		(*p)[key] = v
		return err
	})
}

// end checks that only white space follows the object until r ends.
func (d *requestDecoder) end() error {
	for {
		for ; d.pos < len(d.buf); d.pos++ {
			if c := d.buf[d.pos]; !isSpace(c) {
				return badRequest("unexpected %q after the inference request JSON (binary tensor data needs the %s header)", clip(d.buf[d.pos:]), HeaderContentLength)
			}
		}
		if d.rerr != nil {
			break
		}
		// Read what is left into a small buffer of its own, not into buf.
		var tail [512]byte
		n, err := d.r.Read(tail[:])
		d.rerr = err
		d.tail += int64(n)
		for i, c := range tail[:n] {
			if !isSpace(c) {
				return badRequest("unexpected %q after the inference request JSON (binary tensor data needs the %s header)", clip(tail[i:n]), HeaderContentLength)
			}
		}
	}
	if d.rerr != io.EOF {
		return readError(d.rerr)
	}
	return nil
}
