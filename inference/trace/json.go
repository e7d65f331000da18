package trace

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// metaEvent names or orders a process or thread ("ph":"M").
type metaEvent struct {
	Name string         `json:"name"`
	Ph   string         `json:"ph"`
	Ts   int            `json:"ts"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args"`
}

// spanEvent is one span as a complete event ("ph":"X"); times are in µs.
type spanEvent struct {
	Name string   `json:"name"`
	Cat  string   `json:"cat"`
	Ph   string   `json:"ph"`
	Ts   float64  `json:"ts"`
	Dur  float64  `json:"dur"`
	Pid  int      `json:"pid"`
	Tid  int      `json:"tid"`
	Args spanArgs `json:"args"`
}

// spanArgs are a span's details, in key order. A batch's stage spans say
// which clock timed them and list the batch's requests; a queue span names
// its request. Pointers tell an absent value from a zero one.
type spanArgs struct {
	Batch     int64     `json:"batch"`
	Clock     string    `json:"clock,omitempty"`       // "host" or "device"
	DeviceUS  *float64  `json:"device_us,omitempty"`   // device-measured duration
	HostUS    *float64  `json:"host_us,omitempty"`     // the host span's duration
	Images    *int64    `json:"images,omitempty"`      // the request's images
	Request   *uint64   `json:"request,omitempty"`     // the request's ID
	Requests  *[]uint64 `json:"requests,omitempty"`    // the batch's request IDs
	SendLagUS *float64  `json:"send_lag_us,omitempty"` // admitted - sent
	Worker    int       `json:"worker"`
}

// micros returns ns nanoseconds as microseconds.
func micros(ns int64) float64 { return float64(ns) / 1e3 }

// newSpanEvent returns s as a complete event with times from origin.
func newSpanEvent(s *span, origin int64) spanEvent {
	e := spanEvent{
		Name: kindNames[s.key.kind], Cat: "inference", Ph: "X",
		Ts: micros(s.start - origin), Dur: micros(s.end - s.start), Pid: s.pid, Tid: s.tid,
		Args: spanArgs{Batch: s.batch.images, Worker: s.batch.rec.worker},
	}
	if s.request >= 0 {
		q := s.batch.reqs[s.request]
		e.Args.Images, e.Args.Request = &q.images, &q.id
		if q.sent != absent {
			lag := micros(q.admitted - q.sent)
			e.Args.SendLagUS = &lag
		}
		return e
	}
	e.Args.Clock = "host"
	if s.device {
		e.Args.Clock = "device"
		dev := micros(s.deviceDur)
		e.Args.DeviceUS = &dev
		if s.hostDur != absent {
			host := micros(s.hostDur)
			e.Args.HostUS = &host
		}
	}
	ids := make([]uint64, len(s.batch.reqs))
	for i, q := range s.batch.reqs {
		ids[i] = q.id
	}
	e.Args.Requests = &ids
	return e
}

// WriteJSON writes the recorded batches to w in the Chrome trace event JSON
// object format: {"traceEvents": [...], "displayTimeUnit": "ns"}, one event
// per line. Times are microseconds from the earliest span.
func (r *Recorder) WriteJSON(w io.Writer) error {
	var spans []*span
	var lanes []laneKey
	var origin int64
	if r != nil {
		spans, lanes, origin = layout(r.snapshot())
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString(`{"traceEvents": [`)
	sep := "\n"
	var err error
	write := func(e any) {
		if err != nil {
			return
		}
		var line []byte
		if line, err = json.Marshal(e); err == nil {
			bw.WriteString(sep)
			bw.Write(line)
			sep = ",\n"
		}
	}
	meta := func(name string, pid, tid int, key string, value any) {
		write(metaEvent{Name: name, Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{key: value}})
	}
	tid := 0
	for i, l := range lanes {
		pid := processID(l.key.device)
		tid++
		if i == 0 || lanes[i-1].key.device != l.key.device {
			tid = 1
			meta("process_name", pid, 0, "name", processName(l.key.device))
			meta("process_sort_index", pid, 0, "sort_index", pid)
		}
		meta("thread_name", pid, tid, "name", l.name())
		meta("thread_sort_index", pid, tid, "sort_index", tid)
	}
	for _, s := range spans {
		write(newSpanEvent(s, origin))
	}
	if err != nil {
		return fmt.Errorf("trace: encoding: %w", err)
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
