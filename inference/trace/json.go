package trace

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"
)

// kind is the track a span belongs on within a worker, in display order.
type kind int

const (
	kindQueue kind = iota
	kindH2D
	kindCompute
	kindD2H
	kindDeliver
)

// kindNames are the event names, and the suffixes of the track names.
var kindNames = [...]string{"queue", "h2d", "compute", "d2h", "deliver"}

// trackKey names one logical track: the queue of a device, or one stream of a
// worker. Overlapping spans on it are spread over lanes.
type trackKey struct {
	device int
	worker int // -1 for the queue
	kind   kind
}

func (k trackKey) name() string {
	if k.kind == kindQueue {
		return "queue"
	}
	return fmt.Sprintf("worker %d %s", k.worker, kindNames[k.kind])
}

func compareKeys(a, b trackKey) int {
	return cmp.Or(cmp.Compare(a.device, b.device), cmp.Compare(a.worker, b.worker), cmp.Compare(a.kind, b.kind))
}

// span is one interval to draw, before it is placed on a lane.
type span struct {
	key        trackKey
	start, end time.Time
	args       map[string]any
	lane       int // within the track
	pid, tid   int // once the lanes are numbered
}

// processID is the trace pid of a device: 1 for the CPU, 2+N for GPU N.
func processID(device int) int {
	if device < 0 {
		return 1
	}
	return device + 2
}

func processName(device int) string {
	if device < 0 {
		return "cpu"
	}
	return fmt.Sprintf("gpu %d", device)
}

// spans turns one batch into the spans it draws, appending them to out.
func appendSpans(out []span, b *Batch) []span {
	images := 0
	ids := make([]uint64, len(b.Requests))
	for i, r := range b.Requests {
		images += r.Images
		ids[i] = r.ID
	}
	key := func(k kind) trackKey { return trackKey{device: b.Device, worker: b.Worker, kind: k} }
	batchArgs := func(clock string) map[string]any {
		return map[string]any{"requests": ids, "batch": images, "worker": b.Worker, "clock": clock}
	}

	for _, r := range b.Requests {
		if r.Admitted.IsZero() || b.Started.IsZero() {
			continue
		}
		args := map[string]any{"request": r.ID, "images": r.Images, "batch": images, "worker": b.Worker}
		if !r.Sent.IsZero() {
			args["send_lag_us"] = micros(r.Admitted.Sub(r.Sent))
		}
		out = append(out, span{key: trackKey{device: b.Device, worker: -1, kind: kindQueue},
			start: r.Admitted, end: b.Started, args: args})
	}

	host := [3]Span{b.CopyIn, b.Compute, b.CopyOut}
	if b.DeviceTimed && !b.CopyOut.End.IsZero() {
		// Backwards from the end of the copy-out, clipped at the host's issue.
		floor := cmp.Or(b.CopyIn.Start, b.Started)
		dev := [3]time.Duration{b.H2D, b.ComputeDev, b.D2H}
		var spans [3]Span
		end := b.CopyOut.End
		for i := 2; i >= 0; i-- {
			spans[i] = Span{Start: end.Add(-max(dev[i], 0)), End: end}
			end = spans[i].Start
		}
		for i, s := range spans {
			s.Start, s.End = later(s.Start, floor), later(s.End, floor)
			args := batchArgs("device")
			args["device_us"] = micros(dev[i])
			if !host[i].Start.IsZero() {
				args["host_us"] = micros(host[i].End.Sub(host[i].Start))
			}
			out = append(out, span{key: key(kindH2D + kind(i)), start: s.Start, end: s.End, args: args})
		}
	} else {
		for i, s := range host {
			if s.Start.IsZero() {
				continue
			}
			out = append(out, span{key: key(kindH2D + kind(i)), start: s.Start, end: s.End, args: batchArgs("host")})
		}
	}

	if !b.Delivered.IsZero() && !b.CopyOut.End.IsZero() {
		out = append(out, span{key: key(kindDeliver), start: b.CopyOut.End, end: b.Delivered, args: batchArgs("host")})
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

// micros is d in microseconds, with nanosecond precision.
func micros(d time.Duration) json.Number {
	return json.Number(strconv.FormatFloat(float64(d)/1e3, 'f', -1, 64))
}

// event is one Chrome trace event.
type event struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   json.Number    `json:"ts"`
	Dur  json.Number    `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// events lays the batches out as trace events: metadata first, then the
// complete events ordered by time.
func events(batches []Batch) []event {
	var spans []span
	for i := range batches {
		spans = appendSpans(spans, &batches[i])
	}
	if len(spans) == 0 {
		return nil
	}
	for i := range spans {
		if spans[i].end.Before(spans[i].start) {
			spans[i].end = spans[i].start
		}
	}
	slices.SortStableFunc(spans, func(a, b span) int {
		return cmp.Or(compareKeys(a.key, b.key), a.start.Compare(b.start), a.end.Compare(b.end))
	})
	origin := spans[0].start
	for _, s := range spans {
		if s.start.Before(origin) {
			origin = s.start
		}
	}

	// Lanes: within a track, a span goes on the first lane that is free by
	// its start. Spans are sorted by track, then start.
	type laneKey struct {
		key  trackKey
		lane int
	}
	var laneEnds []time.Time
	var lanes []laneKey // every lane, in track order
	for i := range spans {
		if i == 0 || spans[i].key != spans[i-1].key {
			laneEnds = laneEnds[:0]
		}
		s := &spans[i]
		s.lane = -1
		for l, end := range laneEnds {
			if !s.start.Before(end) {
				s.lane = l
				break
			}
		}
		if s.lane < 0 {
			s.lane = len(laneEnds)
			laneEnds = append(laneEnds, time.Time{})
			lanes = append(lanes, laneKey{s.key, s.lane})
		}
		laneEnds[s.lane] = s.end
	}

	// Thread ids count from 1 within each process, in track order.
	tids := make(map[laneKey]int, len(lanes))
	var out []event
	for i, l := range lanes {
		pid := processID(l.key.device)
		if i == 0 || lanes[i-1].key.device != l.key.device {
			out = append(out,
				meta("process_name", pid, 0, map[string]any{"name": processName(l.key.device)}),
				meta("process_sort_index", pid, 0, map[string]any{"sort_index": pid}))
		}
		tid := 1
		if i > 0 && lanes[i-1].key.device == l.key.device {
			tid = tids[lanes[i-1]] + 1
		}
		tids[l] = tid
		name := l.key.name()
		if l.lane > 0 {
			name = fmt.Sprintf("%s #%d", name, l.lane+1)
		}
		out = append(out,
			meta("thread_name", pid, tid, map[string]any{"name": name}),
			meta("thread_sort_index", pid, tid, map[string]any{"sort_index": tid}))
	}
	for i := range spans {
		s := &spans[i]
		s.pid, s.tid = processID(s.key.device), tids[laneKey{s.key, s.lane}]
	}
	slices.SortStableFunc(spans, func(a, b span) int {
		return cmp.Or(a.start.Compare(b.start), cmp.Compare(a.pid, b.pid), cmp.Compare(a.tid, b.tid))
	})
	for _, s := range spans {
		out = append(out, event{
			Name: kindNames[s.key.kind],
			Cat:  "inference",
			Ph:   "X",
			Ts:   micros(s.start.Sub(origin)),
			Dur:  micros(s.end.Sub(s.start)),
			Pid:  s.pid,
			Tid:  s.tid,
			Args: s.args,
		})
	}
	return out
}

func meta(name string, pid, tid int, args map[string]any) event {
	return event{Name: name, Ph: "M", Ts: "0", Pid: pid, Tid: tid, Args: args}
}

// WriteJSON writes the recorded batches to w in the Chrome trace event JSON
// object format: {"traceEvents": [...], "displayTimeUnit": "ns"}, one event
// per line. Times are microseconds from the earliest span.
func (r *Recorder) WriteJSON(w io.Writer) error {
	var batches []Batch
	if r != nil {
		batches = r.snapshot()
	}
	bw := bufio.NewWriter(w)
	bw.WriteString("{\"traceEvents\": [")
	for i, e := range events(batches) {
		line, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("trace: encoding event: %w", err)
		}
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.WriteString("\n")
		bw.Write(line)
	}
	bw.WriteString("\n],\n\"displayTimeUnit\": \"ns\"}\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("trace: writing: %w", err)
	}
	return nil
}

// WriteFile writes the trace to the file at path, replacing it.
func (r *Recorder) WriteFile(path string) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("trace: %w", cerr)
		}
	}()
	return r.WriteJSON(f)
}
