package trace

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"testing"
	"time"
)

// FuzzWriteJSON feeds batches with arbitrary, even inconsistent, times and
// checks that the output is still a valid trace: JSON, named threads,
// non-negative durations, no overlap on a thread.
func FuzzWriteJSON(f *testing.F) {
	f.Add([]byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"))
	f.Add(bytes.Repeat([]byte{0xff, 0, 7, 0x80}, 40))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Each batch takes 26 bytes: 13 little-endian int16 offsets in µs.
		const per = 26
		base := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
		r := New()
		for k := 0; (k+1)*per <= len(data) && k < 40; k++ {
			var v [13]int
			for i := range v {
				v[i] = int(int16(binary.LittleEndian.Uint16(data[k*per+2*i:])))
			}
			at := func(us int) time.Time {
				if us == 0 {
					return time.Time{} // absent
				}
				return base.Add(time.Duration(us) * time.Microsecond)
			}
			b := Batch{
				Worker: v[0] & 3, Device: v[0]>>2&1 - 1, DeviceTimed: v[0]&8 != 0,
				Requests: []Request{{ID: uint64(k), Images: 1, Sent: at(v[1]), Admitted: at(v[2])}},
				Started:  at(v[3]),
				CopyIn:   Span{at(v[4]), at(v[5])}, Compute: Span{at(v[6]), at(v[7])}, CopyOut: Span{at(v[8]), at(v[9])},
				Delivered: at(v[10]),
				H2D:       time.Duration(v[11]) * time.Microsecond, ComputeDev: time.Duration(v[12]) * time.Microsecond,
				D2H: time.Duration(v[11]^v[12]) * time.Microsecond,
			}
			if v[1]&1 != 0 {
				b.Requests = append(b.Requests, Request{ID: uint64(k) + 1<<32, Images: 2, Admitted: at(v[1])})
			}
			r.Batch(&b)
		}
		var buf bytes.Buffer
		if err := r.WriteJSON(&buf); err != nil {
			t.Fatal(err)
		}
		var tf file
		if err := json.Unmarshal(buf.Bytes(), &tf); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, buf.String())
		}
		checkFormat(t, tf)
	})
}
