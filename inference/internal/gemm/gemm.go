// Package gemm multiplies float32 matrices for the CPU back-end.
package gemm

// Sgemm computes C = A·B for row-major A (m x k, row stride lda), B (k x n, row
// stride ldb) and C (m x n, row stride ldc), overwriting C. It is safe for
// concurrent use on disjoint C.
func Sgemm(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		ci := c[i*ldc : i*ldc+n]
		for j := range ci {
			ci[j] = 0
		}
		for p := 0; p < k; p++ {
			av := a[i*lda+p]
			if av == 0 {
				continue
			}
			bp := b[p*ldb : p*ldb+n]
			for j, bv := range bp {
				ci[j] += av * bv
			}
		}
	}
}
