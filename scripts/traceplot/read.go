package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// threadID names one thread of a trace; pid and tid are kept as text because
// the format allows numbers or strings.
type threadID struct{ pid, tid string }

// thread is what the metadata events say about one thread.
type thread struct {
	id                 threadID
	process, name      string
	procSort, sort     float64
	hasProcS, hasSortI bool
}

// event is one complete event.
type event struct {
	thread   threadID
	name     string
	ts, dur  float64 // µs
	fromFile int     // index in the file, for stable ordering
}

// traceFile is the part of a trace that traceplot draws.
type traceFile struct {
	threads map[threadID]*thread
	events  []event
}

// rawEvent is one event as it appears in the file.
type rawEvent struct {
	Name string          `json:"name"`
	Ph   string          `json:"ph"`
	Ts   float64         `json:"ts"`
	Dur  float64         `json:"dur"`
	Pid  json.RawMessage `json:"pid"`
	Tid  json.RawMessage `json:"tid"`
	Args map[string]any  `json:"args"`
}

// readTrace reads a trace in the JSON object or array format.
func readTrace(r io.Reader) (*traceFile, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("traceplot: reading trace: %w", err)
	}
	var raw []rawEvent
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		err = json.Unmarshal(data, &raw)
	} else {
		var obj struct {
			TraceEvents []rawEvent `json:"traceEvents"`
		}
		err = json.Unmarshal(data, &obj)
		raw = obj.TraceEvents
	}
	if err != nil {
		return nil, fmt.Errorf("traceplot: not a trace event file: %w", err)
	}

	tr := &traceFile{threads: map[threadID]*thread{}}
	procs := map[string]*thread{} // process-level metadata, keyed by pid
	get := func(m map[threadID]*thread, id threadID) *thread {
		th, ok := m[id]
		if !ok {
			th = &thread{id: id}
			m[id] = th
		}
		return th
	}
	for i, e := range raw {
		id := threadID{idText(e.Pid), idText(e.Tid)}
		switch e.Ph {
		case "M":
			switch e.Name {
			case "process_name":
				p := get(tr.threads, threadID{pid: id.pid, tid: "\x00process"})
				p.process, _ = e.Args["name"].(string)
				procs[id.pid] = p
			case "process_sort_index":
				p := get(tr.threads, threadID{pid: id.pid, tid: "\x00process"})
				p.procSort, p.hasProcS = number(e.Args["sort_index"])
				procs[id.pid] = p
			case "thread_name":
				get(tr.threads, id).name, _ = e.Args["name"].(string)
			case "thread_sort_index":
				th := get(tr.threads, id)
				th.sort, th.hasSortI = number(e.Args["sort_index"])
			}
		case "X":
			if e.Dur < 0 {
				return nil, fmt.Errorf("traceplot: event %d (%s) has negative dur %g", i, e.Name, e.Dur)
			}
			get(tr.threads, id)
			tr.events = append(tr.events, event{thread: id, name: e.Name, ts: e.Ts, dur: e.Dur, fromFile: i})
		}
	}
	// Fold the process metadata into the threads and drop the placeholders.
	for id, th := range tr.threads {
		if id.tid == "\x00process" {
			delete(tr.threads, id)
			continue
		}
		if p := procs[id.pid]; p != nil {
			th.process, th.procSort, th.hasProcS = p.process, p.procSort, p.hasProcS
		}
	}
	return tr, nil
}

// idText is a pid or tid as text: a number or a string in the file.
func idText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var f float64
	if json.Unmarshal(raw, &f) == nil {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return string(raw)
}

func number(v any) (float64, bool) {
	f, ok := v.(float64)
	return f, ok
}

// label is the row label of a thread: "process: thread", falling back to the
// pid and tid.
func (th *thread) label() string {
	proc, name := th.process, th.name
	if proc == "" {
		proc = "pid " + th.id.pid
	}
	if name == "" {
		name = "tid " + th.id.tid
	}
	return proc + ": " + name
}
