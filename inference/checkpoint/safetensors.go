package checkpoint

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// safetensors: an 8-byte little-endian header length n, n bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {...}}, then the data; offsets are relative to the data's start.

// maxHeader bounds a safetensors header, as the reference implementation does.
const maxHeader = 100 << 20

var safetensorsDTypes = map[string]DType{
	"F32": F32, "F64": F64, "F16": F16, "BF16": BF16, "I64": I64, "I32": I32,
	"I16": I16, "I8": I8, "U8": U8, "BOOL": Bool,
}

type safetensorsEntry struct {
	DType       string  `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

func readSafetensors(r io.ReaderAt, size int64) (map[string]Tensor, error) {
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("%w: safetensors header length: %v", ErrCorrupt, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxHeader || int64(n) > size-8 {
		return nil, fmt.Errorf("%w: safetensors header of %d bytes in a %d-byte file", ErrCorrupt, n, size)
	}
	header := make([]byte, n)
	if _, err := r.ReadAt(header, 8); err != nil {
		return nil, fmt.Errorf("%w: safetensors header: %v", ErrCorrupt, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(header, &raw); err != nil {
		return nil, fmt.Errorf("%w: safetensors header: %v", ErrCorrupt, err)
	}
	base := 8 + int64(n)
	dataSize := size - base
	names := make([]string, 0, len(raw))
	for name := range raw {
		if name != "__metadata__" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	type entry struct {
		name       string
		dt         DType
		shape      []int64
		begin, end int64
	}
	entries := make([]entry, 0, len(names))
	for _, name := range names {
		var e safetensorsEntry
		if err := json.Unmarshal(raw[name], &e); err != nil {
			return nil, fmt.Errorf("%w: safetensors entry %s: %v", ErrCorrupt, name, err)
		}
		dt, ok := safetensorsDTypes[e.DType]
		if !ok {
			return nil, fmt.Errorf("%w: %s of tensor %s", ErrUnsupportedDType, strconv.Quote(e.DType), name)
		}
		if len(e.DataOffsets) != 2 {
			return nil, fmt.Errorf("%w: tensor %s has data_offsets %v, want [begin, end]", ErrCorrupt, name, e.DataOffsets)
		}
		begin, end := e.DataOffsets[0], e.DataOffsets[1]
		if begin < 0 || end < begin || end > dataSize {
			return nil, fmt.Errorf("%w: tensor %s has data_offsets [%d, %d] outside %d bytes of data", ErrCorrupt, name, begin, end, dataSize)
		}
		count, err := numel(e.Shape, dataSize/int64(dt.Size())+1)
		if err != nil {
			return nil, fmt.Errorf("%w: tensor %s: %v", ErrCorrupt, name, err)
		}
		if count*int64(dt.Size()) != end-begin {
			return nil, fmt.Errorf("%w: tensor %s of shape %v and dtype %s needs %d bytes, data_offsets give %d", ErrCorrupt, name, e.Shape, dt, count*int64(dt.Size()), end-begin)
		}
		entries = append(entries, entry{name, dt, e.Shape, begin, end})
	}
	// Overlapping tensors would let a small file claim many times its size.
	byBegin := slices.Clone(entries)
	slices.SortFunc(byBegin, func(a, b entry) int { return cmp.Compare(a.begin, b.begin) })
	for i := 1; i < len(byBegin); i++ {
		if byBegin[i].begin < byBegin[i-1].end {
			return nil, fmt.Errorf("%w: tensors %s and %s overlap", ErrCorrupt, byBegin[i-1].name, byBegin[i].name)
		}
	}
	out := make(map[string]Tensor, len(entries))
	raws := make(map[string][]byte)
	jobs := make([]readJob, 0, len(entries))
	for _, e := range entries {
		t := Tensor{Shape: intShape(e.shape), DType: e.dt, Data: make([]float32, (e.end-e.begin)/int64(e.dt.Size()))}
		j := readJob{name: "tensor " + e.name, off: base + e.begin}
		if e.dt == F32 && hostLittleEndian {
			j.dst = float32Bytes(t.Data)
		} else {
			j.dst = make([]byte, e.end-e.begin)
			raws[e.name] = j.dst
		}
		jobs = append(jobs, j)
		out[e.name] = t
	}
	if err := readAll(r, jobs); err != nil {
		return nil, err
	}
	for name, b := range raws {
		t := out[name]
		convert(t.Data, b, t.DType, binary.LittleEndian)
	}
	return out, nil
}

// WriteSafetensors writes sd to w in the safetensors format, as float32, keys
// sorted. It fails if a tensor's data does not match its shape.
func WriteSafetensors(w io.Writer, sd map[string]Tensor) error {
	names := make([]string, 0, len(sd))
	for name := range sd {
		if name == "__metadata__" {
			return fmt.Errorf("checkpoint: tensor name %q is reserved", name)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	var hdr strings.Builder
	hdr.WriteByte('{')
	var off int64
	for i, name := range names {
		t := sd[name]
		if t.Numel() != len(t.Data) {
			return fmt.Errorf("checkpoint: tensor %s has %d values for shape %v", name, len(t.Data), t.Shape)
		}
		if i > 0 {
			hdr.WriteByte(',')
		}
		key, err := json.Marshal(name)
		if err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		shape, err := json.Marshal(append([]int{}, t.Shape...))
		if err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		end := off + 4*int64(len(t.Data))
		fmt.Fprintf(&hdr, `%s:{"dtype":"F32","shape":%s,"data_offsets":[%d,%d]}`, key, shape, off, end)
		off = end
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(hdr.Len()))
	bw.Write(lenBuf[:])
	bw.WriteString(hdr.String())
	var buf [4]byte
	for _, name := range names {
		if hostLittleEndian {
			bw.Write(float32Bytes(sd[name].Data))
			continue
		}
		for _, v := range sd[name].Data {
			binary.LittleEndian.PutUint32(buf[:], math.Float32bits(v))
			bw.Write(buf[:])
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("checkpoint: writing safetensors: %w", err)
	}
	return nil
}
