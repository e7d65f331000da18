package cuda

// padSizes returns, for every batch size n in 1..maxBatch (index n), the size
// to run it at: the smallest m in [n, min(2n, maxBatch)] with prepared(m), or n
// when there is none. Running a batch padded to a prepared size reuses that
// size's plan and CUDA graph instead of planning a new size on the request
// path, for at most twice the arithmetic.
func padSizes(maxBatch int, prepared func(m int) bool) []int {
	run := make([]int, maxBatch+1)
	for n := 1; n <= maxBatch; n++ {
		run[n] = n
		for m := n; m <= min(2*n, maxBatch); m++ {
			if prepared(m) {
				run[n] = m
				break
			}
		}
	}
	return run
}
