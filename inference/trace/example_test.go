package trace_test

import (
	"fmt"
	"os"
	"time"

	"github.com/inferbench/inferbench/inference/trace"
)

// A worker records each batch it ran; the trace is written once at the end.
func Example() {
	rec := trace.New()
	t0 := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	at := func(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }
	rec.Batch(&trace.Batch{
		Worker: 0, Device: trace.CPU,
		Requests:  []trace.Request{{ID: 1, Images: 8, Sent: at(0), Admitted: at(0)}},
		Started:   at(10),
		CopyIn:    trace.Span{Start: at(10), End: at(30)},
		Compute:   trace.Span{Start: at(30), End: at(530)},
		CopyOut:   trace.Span{Start: at(530), End: at(540)},
		Delivered: at(545),
	})
	fmt.Println(rec.Len(), "batch")
	if err := rec.WriteJSON(os.Stdout); err != nil {
		fmt.Println(err)
	}
	// Output:
	// 1 batch
	// {"traceEvents": [
	// {"name":"process_name","ph":"M","ts":0,"pid":1,"tid":0,"args":{"name":"cpu"}},
	// {"name":"process_sort_index","ph":"M","ts":0,"pid":1,"tid":0,"args":{"sort_index":1}},
	// {"name":"thread_name","ph":"M","ts":0,"pid":1,"tid":1,"args":{"name":"queue"}},
	// {"name":"thread_sort_index","ph":"M","ts":0,"pid":1,"tid":1,"args":{"sort_index":1}},
	// {"name":"thread_name","ph":"M","ts":0,"pid":1,"tid":2,"args":{"name":"worker 0 h2d"}},
	// {"name":"thread_sort_index","ph":"M","ts":0,"pid":1,"tid":2,"args":{"sort_index":2}},
	// {"name":"thread_name","ph":"M","ts":0,"pid":1,"tid":3,"args":{"name":"worker 0 compute"}},
	// {"name":"thread_sort_index","ph":"M","ts":0,"pid":1,"tid":3,"args":{"sort_index":3}},
	// {"name":"thread_name","ph":"M","ts":0,"pid":1,"tid":4,"args":{"name":"worker 0 d2h"}},
	// {"name":"thread_sort_index","ph":"M","ts":0,"pid":1,"tid":4,"args":{"sort_index":4}},
	// {"name":"thread_name","ph":"M","ts":0,"pid":1,"tid":5,"args":{"name":"worker 0 deliver"}},
	// {"name":"thread_sort_index","ph":"M","ts":0,"pid":1,"tid":5,"args":{"sort_index":5}},
	// {"name":"queue","cat":"inference","ph":"X","ts":0,"dur":10,"pid":1,"tid":1,"args":{"batch":8,"images":8,"request":1,"send_lag_us":0,"worker":0}},
	// {"name":"h2d","cat":"inference","ph":"X","ts":10,"dur":20,"pid":1,"tid":2,"args":{"batch":8,"clock":"host","requests":[1],"worker":0}},
	// {"name":"compute","cat":"inference","ph":"X","ts":30,"dur":500,"pid":1,"tid":3,"args":{"batch":8,"clock":"host","requests":[1],"worker":0}},
	// {"name":"d2h","cat":"inference","ph":"X","ts":530,"dur":10,"pid":1,"tid":4,"args":{"batch":8,"clock":"host","requests":[1],"worker":0}},
	// {"name":"deliver","cat":"inference","ph":"X","ts":540,"dur":5,"pid":1,"tid":5,"args":{"batch":8,"clock":"host","requests":[1],"worker":0}}
	// ],
	// "displayTimeUnit": "ns"}
}
