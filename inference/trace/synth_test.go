package trace

import (
	"math/rand/v2"
	"time"
)

// synth describes a made-up run to record: Workers workers on Device each
// run Batches batches of Requests requests through a serial or overlapped
// pipeline, with random stage times.
type synth struct {
	Device, Workers, Batches, Requests int
	Overlap                            bool // copy-in, compute and copy-out of different batches overlap, 2 slots
	DeviceTimed                        bool // GPU-style: host spans are issue times, device durations given
	Seed                               uint64
}

var synthBase = time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)

// batches simulates the run, returning batches as a server would record them.
// Each worker's stages behave like the server's pipelines: the serial one runs
// a batch's stages back to back; the overlap one runs each stage on its own
// goroutine, with at most two batches in flight.
func (s synth) batches() []Batch {
	rng := rand.New(rand.NewPCG(s.Seed, 1))
	us := func(lo, hi int) time.Duration {
		return time.Duration(lo*1000 + rng.IntN((hi-lo)*1000+1))
	}
	var out []Batch
	id := uint64(0)
	arrival := synthBase
	for w := range s.Workers {
		var inFree, computeFree, outFree time.Time
		var slotFree [2]time.Time
		for k := range s.Batches {
			b := Batch{Worker: w, Device: s.Device, DeviceTimed: s.DeviceTimed}
			last := arrival
			for range s.Requests {
				arrival = arrival.Add(us(0, 40))
				id++
				b.Requests = append(b.Requests, Request{
					ID: id, Images: 1 + rng.IntN(4),
					Sent: arrival.Add(-us(0, 5)), Admitted: arrival,
				})
				last = arrival
			}
			free := later(inFree, slotFree[k%2])
			if !s.Overlap {
				free = later(free, outFree)
			}
			b.Started = later(last, free).Add(us(1, 5))

			// Real (device or CPU) work of each stage.
			work := [3]time.Duration{us(20, 60), us(100, 300), us(10, 30)}
			in := Span{Start: b.Started.Add(us(0, 2))}
			if s.DeviceTimed {
				// The host issues each stage quickly; copy-out's host span
				// lasts until the device is done (the Wait).
				in.End = in.Start.Add(us(2, 8))
				devIn := work[0]
				comp := Span{Start: later(in.End, computeFree)}
				comp.End = comp.Start.Add(us(5, 15))
				devCompStart := later(in.Start.Add(devIn), computeFree)
				devCompEnd := devCompStart.Add(work[1])
				outSpan := Span{Start: later(comp.End, outFree)}
				devOutEnd := later(devCompEnd, outSpan.Start).Add(work[2])
				outSpan.End = devOutEnd.Add(us(1, 10))
				b.CopyIn, b.Compute, b.CopyOut = in, comp, outSpan
				b.H2D, b.ComputeDev, b.D2H = work[0], work[1], work[2]
				computeFree = devCompEnd
			} else {
				in.End = in.Start.Add(work[0])
				comp := Span{Start: later(in.End, computeFree)}
				comp.End = comp.Start.Add(work[1])
				outSpan := Span{Start: later(comp.End, outFree)}
				outSpan.End = outSpan.Start.Add(work[2])
				b.CopyIn, b.Compute, b.CopyOut = in, comp, outSpan
				computeFree = comp.End
			}
			b.Delivered = b.CopyOut.End.Add(us(1, 10))
			inFree, outFree = b.CopyIn.End, b.Delivered
			slotFree[k%2] = b.Delivered
			out = append(out, b)
		}
		arrival = synthBase
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}
