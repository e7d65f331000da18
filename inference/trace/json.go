package trace

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
)

// appendMicros appends ns nanoseconds as microseconds, exactly.
func appendMicros(buf []byte, ns int64) []byte {
	return strconv.AppendFloat(buf, float64(ns)/1e3, 'f', -1, 64)
}

func appendMeta(buf []byte, name string, pid, tid int, key string, value any) []byte {
	buf = append(buf, `{"name":"`...)
	buf = append(buf, name...)
	buf = append(buf, `","ph":"M","ts":0,"pid":`...)
	buf = strconv.AppendInt(buf, int64(pid), 10)
	buf = append(buf, `,"tid":`...)
	buf = strconv.AppendInt(buf, int64(tid), 10)
	buf = append(buf, `,"args":{"`...)
	buf = append(buf, key...)
	buf = append(buf, `":`...)
	switch v := value.(type) {
	case string:
		q, _ := json.Marshal(v) // a string always encodes
		buf = append(buf, q...)
	case int:
		buf = strconv.AppendInt(buf, int64(v), 10)
	}
	return append(buf, "}}"...)
}

// appendEvent appends s as a complete event; its args are in key order.
func appendEvent(buf []byte, s *span, origin int64) []byte {
	buf = append(buf, `{"name":"`...)
	buf = append(buf, kindNames[s.key.kind]...)
	buf = append(buf, `","cat":"inference","ph":"X","ts":`...)
	buf = appendMicros(buf, s.start-origin)
	buf = append(buf, `,"dur":`...)
	buf = appendMicros(buf, s.end-s.start)
	buf = append(buf, `,"pid":`...)
	buf = strconv.AppendInt(buf, int64(s.pid), 10)
	buf = append(buf, `,"tid":`...)
	buf = strconv.AppendInt(buf, int64(s.tid), 10)
	buf = append(buf, `,"args":{"batch":`...)
	buf = strconv.AppendInt(buf, s.batch.images, 10)
	if s.request < 0 {
		if !s.device {
			buf = append(buf, `,"clock":"host"`...)
		} else {
			buf = append(buf, `,"clock":"device","device_us":`...)
			buf = appendMicros(buf, s.deviceDur)
			if s.hostDur != absent {
				buf = append(buf, `,"host_us":`...)
				buf = appendMicros(buf, s.hostDur)
			}
		}
		buf = append(buf, `,"requests":[`...)
		for i, q := range s.batch.reqs {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = strconv.AppendUint(buf, q.id, 10)
		}
		buf = append(buf, ']')
	} else {
		q := s.batch.reqs[s.request]
		buf = append(buf, `,"images":`...)
		buf = strconv.AppendInt(buf, q.images, 10)
		buf = append(buf, `,"request":`...)
		buf = strconv.AppendUint(buf, q.id, 10)
		if q.sent != absent {
			buf = append(buf, `,"send_lag_us":`...)
			buf = appendMicros(buf, q.admitted-q.sent)
		}
	}
	buf = append(buf, `,"worker":`...)
	buf = strconv.AppendInt(buf, int64(s.batch.rec.worker), 10)
	return append(buf, "}}"...)
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
	buf := make([]byte, 0, 1024)
	buf = append(buf, `{"traceEvents": [`...)
	first := true
	next := func() {
		if !first {
			buf = append(buf, ',')
		}
		first = false
		buf = append(buf, '\n')
	}
	tid := 0
	for i, l := range lanes {
		pid := processID(l.key.device)
		tid++
		if i == 0 || lanes[i-1].key.device != l.key.device {
			tid = 1
			next()
			buf = appendMeta(buf, "process_name", pid, 0, "name", processName(l.key.device))
			next()
			buf = appendMeta(buf, "process_sort_index", pid, 0, "sort_index", pid)
		}
		next()
		buf = appendMeta(buf, "thread_name", pid, tid, "name", l.name())
		next()
		buf = appendMeta(buf, "thread_sort_index", pid, tid, "sort_index", tid)
	}
	for _, s := range spans {
		next()
		buf = appendEvent(buf, s, origin)
		if len(buf) > 32<<10 {
			bw.Write(buf)
			buf = buf[:0]
		}
	}
	buf = append(buf, "\n],\n\"displayTimeUnit\": \"ns\"}\n"...)
	bw.Write(buf)
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
