package trace

import (
	"cmp"
	"fmt"
	"math"
	"slices"
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

// span is one interval to draw, before it is placed on a lane. Times are
// Unix nanoseconds.
type span struct {
	key        trackKey
	start, end int64
	batch      *batchInfo
	request    int // index in batch.reqs of a queue span's request, else -1
	device     bool
	deviceDur  int64 // device-measured duration, when device
	hostDur    int64 // the host span's duration, absent if unknown
	seq        int   // creation order, the last tie-breaker of sorts
	lane       int   // within the track
	pid, tid   int   // once the lanes are numbered
}

// batchInfo is what every span of a batch shares.
type batchInfo struct {
	rec    *record
	reqs   []requestRecord
	images int64
	placed bool        // dev holds the device-timed stages
	dev    [3][2]int64 // h2d, compute, d2h: start, end
}

// issue is when the host issued b's first stage.
func (b *record) issue() int64 {
	if b.in[0] != absent {
		return b.in[0]
	}
	return b.started
}

// placeDevice lays out the device-timed stages of every batch. The device
// measured how long each stage took, not when it ran; the host saw the
// copy-out finish at out[1], so the stages ran back to back ending no later
// than that. Each stream also runs one stage at a time, in the order the
// batches were issued, so a stage ends no later than the same stream's stage
// of the worker's next batch starts. Going from a worker's last batch to its
// first, each stage is placed as late as both bounds allow, then clipped
// so that it does not start before the host issued the batch.
func placeDevice(infos []batchInfo) {
	type stream struct{ device, worker int }
	groups := map[stream][]*batchInfo{}
	for i := range infos {
		if b := infos[i].rec; b.deviceTimed && b.out[1] != absent {
			k := stream{b.device, b.worker}
			groups[k] = append(groups[k], &infos[i])
		}
	}
	for _, g := range groups {
		slices.SortFunc(g, func(x, y *batchInfo) int {
			return cmp.Or(cmp.Compare(x.rec.issue(), y.rec.issue()), cmp.Compare(x.rec.out[1], y.rec.out[1]))
		})
		next := [3]int64{math.MaxInt64, math.MaxInt64, math.MaxInt64}
		for k := len(g) - 1; k >= 0; k-- {
			info, b := g[k], g[k].rec
			dev := [3]int64{b.h2d, b.computeDev, b.d2h}
			floor := b.issue()
			end := b.out[1]
			for i := 2; i >= 0; i-- {
				end = min(end, next[i])
				start := end - max(dev[i], 0)
				info.dev[i] = [2]int64{max(start, floor), max(end, floor)}
				end = start
			}
			for i := range next {
				next[i] = info.dev[i][0]
			}
			info.placed = true
		}
	}
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

// appendSpans turns one batch into the spans it draws, appending them to out.
func appendSpans(out []span, info *batchInfo) []span {
	b := info.rec
	key := func(k kind) trackKey { return trackKey{device: b.device, worker: b.worker, kind: k} }
	for i, q := range info.reqs {
		if q.admitted == absent || b.started == absent {
			continue
		}
		out = append(out, span{key: trackKey{device: b.device, worker: -1, kind: kindQueue},
			start: q.admitted, end: b.started, batch: info, request: i})
	}

	host := [3][2]int64{b.in, b.compute, b.out}
	if info.placed {
		for i, d := range info.dev {
			s := span{key: key(kindH2D + kind(i)), start: d[0], end: d[1], batch: info, request: -1,
				device: true, deviceDur: [3]int64{b.h2d, b.computeDev, b.d2h}[i], hostDur: absent}
			if host[i][0] != absent && host[i][1] != absent {
				s.hostDur = host[i][1] - host[i][0]
			}
			out = append(out, s)
		}
	} else {
		for i, h := range host {
			if h[0] == absent || h[1] == absent {
				continue
			}
			out = append(out, span{key: key(kindH2D + kind(i)), start: h[0], end: h[1], batch: info, request: -1})
		}
	}

	if b.delivered != absent && b.out[1] != absent {
		out = append(out, span{key: key(kindDeliver), start: b.out[1], end: b.delivered, batch: info, request: -1})
	}
	return out
}

// layout turns the batches into spans placed on lanes, with pid and tid set,
// sorted by start time, and returns them with the lanes in display order and
// the origin of the time axis.
func layout(recs []record, reqChunks [][]requestRecord) (sorted []*span, lanes []laneKey, origin int64) {
	var spans []span
	infos := make([]batchInfo, len(recs))
	for i := range recs {
		b := &recs[i]
		info := &infos[i]
		info.rec = b
		if b.nreqs > 0 {
			info.reqs = reqChunks[b.reqChunk][b.reqOff : b.reqOff+b.nreqs]
		}
		for _, q := range info.reqs {
			info.images += q.images
		}
	}
	placeDevice(infos)
	for i := range infos {
		spans = appendSpans(spans, &infos[i])
	}
	if len(spans) == 0 {
		return nil, nil, 0
	}
	// Sort pointers: a span is large.
	sorted = make([]*span, len(spans))
	origin = spans[0].start
	for i := range spans {
		s := &spans[i]
		s.seq = i
		s.end = max(s.end, s.start)
		origin = min(origin, s.start)
		sorted[i] = s
	}
	slices.SortFunc(sorted, func(a, b *span) int {
		return cmp.Or(compareKeys(a.key, b.key), cmp.Compare(a.start, b.start), cmp.Compare(a.end, b.end), cmp.Compare(a.seq, b.seq))
	})

	// Lanes: within a track, a span goes on the first lane that is free at
	// its start. Spans are sorted by track, then start.
	var laneEnds []int64
	for i, s := range sorted {
		if i == 0 || s.key != sorted[i-1].key {
			laneEnds = laneEnds[:0]
		}
		s.lane = -1
		for l, end := range laneEnds {
			if s.start >= end {
				s.lane = l
				break
			}
		}
		if s.lane < 0 {
			s.lane = len(laneEnds)
			laneEnds = append(laneEnds, 0)
			lanes = append(lanes, laneKey{s.key, s.lane})
		}
		laneEnds[s.lane] = s.end
	}

	// Thread ids count from 1 within each process, in display order (WriteJSON
	// numbers the metadata events the same way).
	tids := make(map[laneKey]int, len(lanes))
	for i, l := range lanes {
		tid := 1
		if i > 0 && lanes[i-1].key.device == l.key.device {
			tid = tids[lanes[i-1]] + 1
		}
		tids[l] = tid
	}
	for _, s := range sorted {
		s.pid, s.tid = processID(s.key.device), tids[laneKey{s.key, s.lane}]
	}
	slices.SortFunc(sorted, func(a, b *span) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.pid, b.pid), cmp.Compare(a.tid, b.tid), cmp.Compare(a.seq, b.seq))
	})
	return sorted, lanes, origin
}

// laneKey is one thread of the trace: a lane of a track.
type laneKey struct {
	key  trackKey
	lane int
}

func (l laneKey) name() string {
	if l.lane == 0 {
		return l.key.name()
	}
	return fmt.Sprintf("%s #%d", l.key.name(), l.lane+1)
}
