package conv

// How Run cuts a layer into tasks. A task is a block of consecutive output
// rows (over the images of the batch) for one set of channel groups (one
// group, or several with AVX2: directSets); a thread that takes it reads
// the set's weights once and keeps them in its cache for every row of the
// block. Few blocks per set mean few reads of the weights, which dominate
// the deep layers (9.4 MB in ResNet-18's last stage against 0.2 MB of input
// an image); many blocks mean enough tasks to keep every thread busy, and
// small ones, so that a thread that runs slow holds the layer up by little.
// split picks the number of blocks that minimises a two-term cost: the
// compute of the busiest thread (threads take tasks as they free up, so it
// ends at most one task after the average), and the bytes of weights all
// threads read, at a bandwidth they share.
//
// The constants were fitted to BenchmarkLayer on a 16-thread Xeon host: a
// thread's multiply-add rate, and the bandwidth at which all threads
// together read a stage-4 layer's weights.
const (
	macRate   = 50e9 // multiply-adds per second of one thread
	sharedBW  = 40e9 // bytes per second at which the threads together read weights
	maxSlack  = 8    // at most this many tasks per thread
	tieMargin = 1.02 // costs within 2 % count as equal; the one with more tasks wins
)

// split returns the row blocks per set of channel groups for n images on t
// threads.
func (l *Layer) split(n, t int) int {
	rows := n * l.out.H
	ng := len(l.sets) - 1 // a task computes one set of groups
	in := l.in
	wBytes := float64(4 * len(l.w))
	macsRow := float64(l.out.W*l.out.Pitch*l.k*l.k*in.Pitch) / float64(ng) // per row of one set
	best, bestCost := 1, -1.0
	for b := 1; b <= min(rows, max(1, maxSlack*t/ng)); b++ {
		rt := (rows + b - 1) / b
		if b > 1 && (rows+rt-1)/rt != b {
			continue // the same tasks as a smaller b
		}
		tasks := ng * b
		// Threads take tasks as they free up: the busiest ends at most
		// one task after the average.
		span := (float64(tasks)/float64(t) + 1) * float64(rt)
		bytes := float64(tasks) * wBytes / float64(ng) // each task reads its set's weights
		if ng == 1 {
			bytes = float64(min(t, tasks)) * wBytes // every task shares them: a read per thread
		}
		cost := span*macsRow/macRate + bytes/sharedBW
		if bestCost < 0 || cost <= bestCost*tieMargin {
			best = b
			if bestCost < 0 || cost < bestCost {
				bestCost = cost
			}
		}
	}
	return best
}

// winoTasksPerThread is how many tasks a Winograd layer gives each thread
// when its tiles allow (at 6 tiles a task at least, tb at most). A task
// reads its channel group's weights, so few large tasks read less, but the
// threads of a shared host run at uneven speeds, and small tasks let the
// others take over from a slow one.
const winoTasksPerThread = 8
