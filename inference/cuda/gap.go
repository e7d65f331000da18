package cuda

import "time"

// splitSpan divides the compute stream's span of one batch into the device's
// execution of the forward pass and the time it waited for the host (the launch
// gap). Its inputs, all on the device's clock:
//
//   - span: from the event recorded before the forward pass to the one after it;
//   - enqueued: from the event before the forward pass to an event the host
//     recorded on an idle stream of the same device right after enqueueing all
//     of it, which completes when the host got there; negative when the device
//     reached the forward pass only after the host had finished;
//   - own: the forward pass's own execution time, measured alone with the
//     stream held back until the whole pass was enqueued (0: not measured);
//   - graph: the pass was one graph launch.
//
// The device can wait for the host only while the host is still enqueueing,
// so the gap is at most bound = enqueued clamped to [0, span]. With a graph
// the pass is a single launch, before which the device can do nothing: the gap
// is the bound. Without one, the host enqueues some 30 library calls one after
// another while the device runs those already enqueued: the gap is the span
// beyond the pass's own time, at most the bound (so time lost to other work
// sharing the device after the host finished counts as execution). Without a
// graph and without own, the gap is unknown and ok is false.
func splitSpan(span, enqueued, own time.Duration, graph bool) (compute, gap time.Duration, ok bool) {
	bound := min(max(enqueued, 0), max(span, 0))
	switch {
	case graph:
		gap = bound
	case own > 0:
		gap = min(max(span-own, 0), bound)
	default:
		return span, 0, false
	}
	return span - gap, gap, true
}
