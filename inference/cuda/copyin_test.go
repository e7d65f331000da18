package cuda

import (
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeInput is a device input in host memory: send copies at once.
type fakeInput struct {
	dev   []float32
	sends []string // "off+n" per send, in order
	fail  int      // the send (1-based) that fails; 0: none
}

func (f *fakeInput) send(off int, src unsafe.Pointer, n int) error {
	f.sends = append(f.sends, fmt.Sprintf("%d+%d", off, n))
	if len(f.sends) == f.fail {
		return errors.New("send failed")
	}
	copy(f.dev[off:off+n], unsafe.Slice((*float32)(src), n))
	return nil
}

func TestInputCopy(t *testing.T) {
	// pinned stands for memory from AllocHost: parts cut from it go direct.
	pinned := make([]float32, 4*minJob)
	pageable := make([]float32, 4*minJob)
	for i := range pinned {
		pinned[i], pageable[i] = float32(i), float32(-i)
	}
	type part struct {
		from   []float32
		lo, hi int
	}
	tests := []struct {
		name  string
		parts []part
		sends []string
	}{
		{"one staged part", []part{{pageable, 0, 10}}, []string{"0+10"}},
		{"staged parts, one copy", []part{{pageable, 0, 10}, {pageable, 20, 25}}, []string{"0+15"}},
		{"adjacent direct parts, one copy", []part{{pinned, 0, 10}, {pinned, 10, 30}}, []string{"0+30"}},
		{"direct parts apart", []part{{pinned, 0, 10}, {pinned, 40, 50}}, []string{"0+10", "10+10"}},
		{"direct, staged, direct", []part{{pinned, 0, 10}, {pageable, 0, 5}, {pinned, 10, 20}},
			[]string{"0+10", "10+5", "15+10"}},
		{"staged, direct, staged", []part{{pageable, 0, 5}, {pinned, 0, 10}, {pageable, 5, 9}},
			[]string{"0+5", "5+10", "15+4"}},
		{"empty parts are skipped", []part{{pinned, 0, 10}, {pinned, 10, 10}, {pageable, 3, 3}, {pinned, 10, 12}},
			[]string{"0+12"}},
		{"large staged parts through the copier's goroutines", []part{{pageable, 0, 2 * minJob}, {pageable, 2 * minJob, 4 * minJob}},
			[]string{"0+" + fmt.Sprint(4*minJob)}},
	}
	c := newCopier(4)
	defer c.close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var want []float32
			for _, p := range tt.parts {
				want = append(want, p.from[p.lo:p.hi]...)
			}
			f := &fakeInput{dev: make([]float32, len(want))}
			var staging copyGroup
			in := inputCopy[float32]{send: f.send, stage: make([]float32, len(want)), staging: &staging, copier: c}
			for _, p := range tt.parts {
				direct := &p.from[0] == &pinned[0]
				require.NoError(t, in.add(p.from[p.lo:p.hi], direct))
			}
			require.NoError(t, in.flush())
			in.finish()
			assert.Equal(t, tt.sends, f.sends, "copies (offset+values)")
			assert.Equal(t, want, f.dev, "device input")
		})
	}
}

// TestInputCopyError checks that a failed copy is returned and that finish
// leaves no staging copy running.
func TestInputCopyError(t *testing.T) {
	c := newCopier(4)
	defer c.close()
	src := make([]float32, 2*minJob)
	for i := range src {
		src[i] = 1
	}
	f := &fakeInput{dev: make([]float32, 3*minJob), fail: 1}
	var staging copyGroup
	in := inputCopy[float32]{send: f.send, stage: make([]float32, 3*minJob), staging: &staging, copier: c}
	require.NoError(t, in.add(src, false))
	err := in.add(make([]float32, minJob), true) // flushes the staged run, whose send fails
	assert.ErrorContains(t, err, "send failed")
	in.finish()
	assert.Equal(t, src, in.stage[:2*minJob], "staging copies finished")
}
