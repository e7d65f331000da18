package trace

import (
	"bytes"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// file is a parsed trace, as a viewer reads it.
type file struct {
	TraceEvents     []map[string]any `json:"traceEvents"`
	DisplayTimeUnit string           `json:"displayTimeUnit"`
}

func recordAll(t testing.TB, batches []Batch) *Recorder {
	t.Helper()
	r := New()
	for i := range batches {
		r.Batch(&batches[i])
	}
	return r
}

func parse(t *testing.T, r *Recorder) file {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, r.WriteJSON(&buf))
	var f file
	require.NoError(t, json.Unmarshal(buf.Bytes(), &f), "trace is not JSON:\n%s", buf.String())
	return f
}

// interval is one complete event's extent, in microseconds.
type interval struct{ start, end float64 }

// checkFormat checks f against the trace event format and returns the
// complete events' intervals by request ID and event name.
func checkFormat(t *testing.T, f file) map[uint64]map[string]interval {
	t.Helper()
	assert.Equal(t, "ns", f.DisplayTimeUnit)
	type thread struct{ pid, tid float64 }
	processes := map[float64]bool{}
	threads := map[thread]bool{}
	used := map[thread][]interval{}
	byRequest := map[uint64]map[string]interval{}
	add := func(id uint64, name string, iv interval) {
		if byRequest[id] == nil {
			byRequest[id] = map[string]interval{}
		}
		_, dup := byRequest[id][name]
		assert.False(t, dup, "request %d has two %s events", id, name)
		byRequest[id][name] = iv
	}
	for i, e := range f.TraceEvents {
		for _, k := range []string{"ph", "ts", "pid", "tid", "name"} {
			require.Contains(t, e, k, "event %d: %v", i, e)
		}
		name := e["name"].(string)
		ts, pid, tid := e["ts"].(float64), e["pid"].(float64), e["tid"].(float64)
		switch ph := e["ph"]; ph {
		case "M":
			args, ok := e["args"].(map[string]any)
			require.True(t, ok, "metadata event %d has no args: %v", i, e)
			switch name {
			case "process_name":
				processes[pid] = true
				assert.NotEmpty(t, args["name"])
			case "thread_name":
				threads[thread{pid, tid}] = true
				assert.NotEmpty(t, args["name"])
			case "process_sort_index", "thread_sort_index":
				assert.Contains(t, args, "sort_index")
			default:
				t.Errorf("unknown metadata event %q", name)
			}
		case "X":
			dur, ok := e["dur"].(float64)
			require.True(t, ok, "complete event %d has no dur: %v", i, e)
			assert.GreaterOrEqual(t, dur, 0.0, "event %d: %v", i, e)
			assert.GreaterOrEqual(t, ts, 0.0, "event %d: %v", i, e)
			iv := interval{ts, ts + dur}
			used[thread{pid, tid}] = append(used[thread{pid, tid}], iv)
			args := e["args"].(map[string]any)
			assert.Contains(t, args, "batch")
			assert.Contains(t, args, "worker")
			if id, ok := args["request"]; ok {
				add(uint64(id.(float64)), name, iv)
			}
			if ids, ok := args["requests"]; ok {
				for _, id := range ids.([]any) {
					add(uint64(id.(float64)), name, iv)
				}
			}
		default:
			t.Errorf("event %d: unexpected ph %v", i, ph)
		}
	}
	for th, ivs := range used {
		assert.True(t, processes[th.pid], "pid %v has no process_name", th.pid)
		assert.True(t, threads[th], "pid %v tid %v has no thread_name", th.pid, th.tid)
		// Complete events on one thread must not overlap (we never nest).
		slices.SortFunc(ivs, func(a, b interval) int { return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.end, b.end)) })
		for i := 1; i < len(ivs); i++ {
			assert.LessOrEqual(t, ivs[i-1].end, ivs[i].start+eps, "pid %v tid %v: %v overlaps %v", th.pid, th.tid, ivs[i-1], ivs[i])
		}
	}
	return byRequest
}

// eps absorbs float rounding of ts+dur; times are whole nanoseconds (1e-3 µs).
const eps = 1e-6

func TestFormatAndConsistency(t *testing.T) {
	tests := []struct {
		name string
		run  synth
	}{
		{"cpu/serial/1worker", synth{Device: CPU, Workers: 1, Batches: 6, Requests: 3, Seed: 1}},
		{"cpu/overlap/2workers", synth{Device: CPU, Workers: 2, Batches: 8, Requests: 4, Overlap: true, Seed: 2}},
		{"gpu/overlap/device-timed", synth{Device: 0, Workers: 2, Batches: 8, Requests: 2, Overlap: true, DeviceTimed: true, Seed: 3}},
		{"gpu1/serial/device-timed", synth{Device: 1, Workers: 1, Batches: 5, Requests: 1, DeviceTimed: true, Seed: 4}},
		{"gpu/serial/host-timed", synth{Device: 0, Workers: 3, Batches: 4, Requests: 8, Seed: 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			batches := tt.run.batches()
			r := recordAll(t, batches)
			require.Equal(t, len(batches), r.Len())
			f := parse(t, r)
			byRequest := checkFormat(t, f)
			require.Len(t, byRequest, tt.run.Workers*tt.run.Batches*tt.run.Requests)
			checkOrder(t, byRequest)
			// A stream runs one stage at a time: its track needs no second lane.
			for _, name := range threadNames(f) {
				if !strings.HasPrefix(name, "queue") {
					assert.NotContains(t, name, "#", "stage spans overlap on one stream")
				}
			}
		})
	}
}

// checkOrder checks that every request's stages come one after another:
// queue, h2d, compute, d2h, deliver.
func checkOrder(t *testing.T, byRequest map[uint64]map[string]interval) {
	t.Helper()
	order := []string{"queue", "h2d", "compute", "d2h", "deliver"}
	for id, evs := range byRequest {
		for i, name := range order {
			require.Contains(t, evs, name, "request %d", id)
			if i == 0 {
				continue
			}
			prev, cur := evs[order[i-1]], evs[name]
			assert.LessOrEqual(t, prev.end, cur.start+eps,
				"request %d: %s ends at %v µs, after %s starts at %v µs", id, order[i-1], prev.end, name, cur.start)
		}
	}
}

// TestRecordedTraces checks the traces the server recorded for the pictures
// in docs/ (CPU, and a GPU with device timing).
func TestRecordedTraces(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "..", "docs", "trace*.json"))
	require.NoError(t, err)
	if len(paths) == 0 {
		t.Skip("no docs/trace*.json in this checkout")
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			var f file
			require.NoError(t, json.Unmarshal(data, &f))
			byRequest := checkFormat(t, f)
			require.NotEmpty(t, byRequest)
			checkOrder(t, byRequest)
		})
	}
}

// TestDeviceLayout checks that device-timed spans end at the end of the
// copy-out, back to back, and are clipped at the host's copy-in.
func TestDeviceLayout(t *testing.T) {
	at := func(us int) time.Time { return synthBase.Add(time.Duration(us) * time.Microsecond) }
	tests := []struct {
		name              string
		h2d, compute, d2h time.Duration
		want              map[string]interval // by event name, µs
	}{
		{"fits", 20 * time.Microsecond, 100 * time.Microsecond, 10 * time.Microsecond, map[string]interval{
			"h2d": {60, 80}, "compute": {80, 180}, "d2h": {180, 190}}},
		{"clipped", 100 * time.Microsecond, 150 * time.Microsecond, 10 * time.Microsecond, map[string]interval{
			"h2d": {10, 30}, "compute": {30, 180}, "d2h": {180, 190}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := Batch{
				Device: 0, Requests: []Request{{ID: 7, Images: 1, Admitted: at(0)}},
				Started: at(5), CopyIn: Span{at(10), at(12)}, Compute: Span{at(12), at(15)},
				CopyOut: Span{at(15), at(190)}, Delivered: at(195),
				DeviceTimed: true, H2D: tt.h2d, ComputeDev: tt.compute, D2H: tt.d2h,
			}
			got := checkFormat(t, parse(t, recordAll(t, []Batch{b})))[7]
			for name, want := range tt.want {
				assert.InDelta(t, want.start, got[name].start, eps, "%s start", name)
				assert.InDelta(t, want.end, got[name].end, eps, "%s end", name)
			}
		})
	}
}

func TestLanes(t *testing.T) {
	// Three requests queued at once overlap on the queue track: three lanes.
	at := func(us int) time.Time { return synthBase.Add(time.Duration(us) * time.Microsecond) }
	var batches []Batch
	for i := range 3 {
		batches = append(batches, Batch{
			Device: CPU, Requests: []Request{{ID: uint64(i), Images: 1, Admitted: at(0)}},
			Started: at(10 + 10*i), CopyIn: Span{at(10 + 10*i), at(15 + 10*i)},
		})
	}
	f := parse(t, recordAll(t, batches))
	checkFormat(t, f)
	assert.Equal(t, []string{"queue", "queue #2", "queue #3", "worker 0 h2d"}, threadNames(f))
}

// threadNames returns the thread names of f in file order.
func threadNames(f file) []string {
	var names []string
	for _, e := range f.TraceEvents {
		if e["name"] == "thread_name" {
			names = append(names, e["args"].(map[string]any)["name"].(string))
		}
	}
	return names
}

// TestStreamOrder: the host saw batch 1's copy-out finish late, so laid out
// from that moment alone its compute would overlap batch 2's on the same
// stream. It is moved earlier instead, durations kept.
func TestStreamOrder(t *testing.T) {
	at := func(us int) time.Time { return synthBase.Add(time.Duration(us) * time.Microsecond) }
	mk := func(id uint64, issue, outEnd int) Batch {
		return Batch{
			Device: 0, Requests: []Request{{ID: id, Images: 1, Admitted: at(0)}},
			Started: at(issue), CopyIn: Span{at(issue), at(issue + 1)}, Compute: Span{at(issue + 1), at(issue + 2)},
			CopyOut: Span{at(issue + 2), at(outEnd)}, Delivered: at(outEnd + 1),
			DeviceTimed: true, H2D: 10 * time.Microsecond, ComputeDev: 100 * time.Microsecond, D2H: 5 * time.Microsecond,
		}
	}
	// Batch 2 alone: d2h 225..230, compute 125..225, h2d 115..125.
	// Batch 1 alone would be: d2h 135..140, compute 35..135 (overlapping
	// batch 2's compute by 10 µs), h2d 25..35. Its d2h stays; compute and h2d
	// move 10 µs earlier.
	f := parse(t, recordAll(t, []Batch{mk(2, 20, 230), mk(1, 10, 140)}))
	byRequest := checkFormat(t, f)
	for id, stages := range map[uint64]map[string]interval{
		1: {"h2d": {15, 25}, "compute": {25, 125}, "d2h": {135, 140}},
		2: {"h2d": {115, 125}, "compute": {125, 225}, "d2h": {225, 230}},
	} {
		for name, w := range stages {
			got := byRequest[id][name]
			// ts are relative to the earliest span, batch 1's queue at 0.
			assert.InDelta(t, w.start, got.start, eps, "request %d %s start", id, name)
			assert.InDelta(t, w.end, got.end, eps, "request %d %s end", id, name)
		}
	}
	assert.NotContains(t, strings.Join(threadNames(f), ","), "compute #2")
}

func TestBatchCopies(t *testing.T) {
	b := synth{Device: CPU, Workers: 1, Batches: 1, Requests: 3, Seed: 9}.batches()[0]
	r := New()
	r.Batch(&b)
	var before bytes.Buffer
	require.NoError(t, r.WriteJSON(&before))
	b.Requests[0].ID = 999
	b.Requests = append(b.Requests, Request{ID: 1000})
	b.Worker = 5
	var after bytes.Buffer
	require.NoError(t, r.WriteJSON(&after))
	assert.Equal(t, before.String(), after.String(), "changing the caller's Batch changed the trace")
}

func TestNilAndEmpty(t *testing.T) {
	var nilRec *Recorder
	nilRec.Batch(&Batch{})
	nilRec.Reset()
	assert.Equal(t, 0, nilRec.Len())
	for _, r := range []*Recorder{nilRec, New()} {
		f := parse(t, r)
		assert.Empty(t, f.TraceEvents)
		assert.Equal(t, "ns", f.DisplayTimeUnit)
	}
	r := recordAll(t, synth{Device: CPU, Workers: 1, Batches: 2, Requests: 1}.batches())
	assert.Equal(t, 2, r.Len())
	r.Reset()
	assert.Equal(t, 0, r.Len())
	assert.Empty(t, parse(t, r).TraceEvents)
}

func TestConcurrent(t *testing.T) {
	const goroutines, perGoroutine, requests = 8, 50, 5
	r := New()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			batches := synth{Device: g % 2, Workers: 1, Batches: perGoroutine, Requests: requests, Seed: uint64(g)}.batches()
			for i := range batches {
				for j := range batches[i].Requests {
					batches[i].Requests[j].ID += uint64(g) << 32
				}
				batches[i].Worker = g
				r.Batch(&batches[i])
			}
		})
	}
	wg.Wait()
	assert.Equal(t, goroutines*perGoroutine, r.Len())
	byRequest := checkFormat(t, parse(t, r))
	assert.Len(t, byRequest, goroutines*perGoroutine*requests)
}

func TestWriteFile(t *testing.T) {
	r := recordAll(t, synth{Device: CPU, Workers: 2, Batches: 3, Requests: 2, Overlap: true}.batches())
	path := filepath.Join(t.TempDir(), "t.json")
	require.NoError(t, r.WriteFile(path))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	var want bytes.Buffer
	require.NoError(t, r.WriteJSON(&want))
	assert.Equal(t, want.String(), string(got))

	err = r.WriteFile(filepath.Join(t.TempDir(), "missing", "t.json"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "trace: ")
}

// TestGolden pins the output for two fixed batches: a CPU batch and a
// device-timed GPU batch whose requests overlap in the queue.
func TestGolden(t *testing.T) {
	at := func(us int) time.Time { return synthBase.Add(time.Duration(us)*time.Microsecond + 250) }
	batches := []Batch{
		{
			Worker: 1, Device: CPU,
			Requests: []Request{{ID: 1, Images: 2, Sent: at(0), Admitted: at(3)}, {ID: 2, Images: 1, Sent: at(4), Admitted: at(5)}},
			Started:  at(10), CopyIn: Span{at(11), at(20)}, Compute: Span{at(20), at(120)}, CopyOut: Span{at(121), at(125)},
			Delivered: at(127),
		},
		{
			Worker: 0, Device: 0,
			Requests: []Request{{ID: 3, Images: 32, Sent: at(2), Admitted: at(2)}},
			Started:  at(12), CopyIn: Span{at(13), at(15)}, Compute: Span{at(15), at(18)}, CopyOut: Span{at(18), at(100)},
			Delivered:   at(101),
			DeviceTimed: true, H2D: 30 * time.Microsecond, ComputeDev: 40*time.Microsecond + 500, D2H: 5 * time.Microsecond,
		},
	}
	var buf bytes.Buffer
	require.NoError(t, recordAll(t, batches).WriteJSON(&buf))
	path := filepath.Join("testdata", "golden.json")
	if *update {
		require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create it")
	assert.Equal(t, string(want), buf.String())
	checkFormat(t, parse(t, recordAll(t, batches)))
}

func BenchmarkBatch(b *testing.B) {
	for _, n := range []int{1, 32} {
		b.Run(fmt.Sprintf("requests=%d", n), func(b *testing.B) {
			batch := synth{Device: 0, Workers: 1, Batches: 1, Requests: n, DeviceTimed: true, Overlap: true}.batches()[0]
			r := New()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r.Batch(&batch)
				// Bound the memory a long run holds; the cost of filling
				// fresh chunks stays in the measurement.
				if i++; i%(1<<16) == 0 {
					r.Reset()
				}
			}
		})
	}
}

func BenchmarkWriteJSON(b *testing.B) {
	r := recordAll(b, synth{Device: 0, Workers: 2, Batches: 500, Requests: 4, Overlap: true, DeviceTimed: true}.batches())
	b.ReportAllocs()
	for b.Loop() {
		if err := r.WriteJSON(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(r.Len()), "ns/batch")
}

func TestChunks(t *testing.T) {
	tests := []struct{ n, want int }{{0, 16}, {1, 32}, {5, 512}, {6, 512}, {40, 512}}
	for _, tt := range tests {
		assert.Equal(t, tt.want, chunkSize(tt.n, firstBatchChunk, batchChunk), "chunkSize(%d)", tt.n)
	}

	// Batches across many chunks, one with more requests than a chunk holds.
	batches := synth{Device: CPU, Workers: 1, Batches: 100, Requests: 3, Seed: 7}.batches()
	big := synth{Device: CPU, Workers: 1, Batches: 1, Requests: requestChunk + 10, Seed: 8}.batches()[0]
	for i := range big.Requests {
		big.Requests[i].ID += 1 << 40
	}
	batches = append(batches[:50:50], append([]Batch{big}, batches[50:]...)...)
	r := recordAll(t, batches)
	assert.Equal(t, 101, r.Len())
	assert.Len(t, checkFormat(t, parse(t, r)), 300+requestChunk+10)
}
