package suite

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/inferbench/inferbench/inference/loadgen"
)

// The columns of the -csv file: the benchmark and its -count run, every
// dimension a benchmark name can carry (empty where it has none), the suite's
// config settings, the requests in the reported interval and every unit.
var (
	csvDims   = []string{"backend", "batch", "workers", "pipeline", "precision", "graphs", "devices", "servers", "load", "concurrency", "rate", "transport", "scenario", "batching"}
	csvConfig = []string{"model", "size", "checkpoint", "seed", "pinned-input", "poisson", "window", "cold-start", "gomaxprocs", "target"}
)

func csvHeader() []string {
	h := []string{"benchmark", "run"}
	h = append(h, csvDims...)
	h = append(h, csvConfig...)
	h = append(h, "requests", "ns/op")
	for _, u := range units {
		h = append(h, u.name)
	}
	return append(h, "server-req/s", "slo", "max-rate-req/s")
}

// requestsHeader is the -requests file's header. Times are nanoseconds from
// the run's first intended send; stage times are device-timed when
// device_timed is true, wall-clock otherwise. A request to a server over the
// network has only sent_ns and done_ns (its answer's arrival, on the
// suite's clock) and server, the index of the server that answered.
var requestsHeader = []string{"benchmark", "run", "request", "sent_ns", "admitted_ns", "started_ns", "done_ns",
	"queue_ns", "h2d_ns", "compute_ns", "d2h_ns", "device_timed", "worker", "batch_images", "server", "error"}

// curveHeader is the -curve file's header: one row per capacity trial.
var curveHeader = []string{"benchmark", "run", "search", "slo", "rate_req_s", "sent", "failed", "late", "p50_ns", "slo_percentile_ns", "ok"}

// csvFile is an export file opened for appending: a new or empty file gets
// the header; an existing one must already have it.
type csvFile struct {
	path string
	f    *os.File
	w    *csv.Writer
}

// openCSV opens path for appending rows under header.
func openCSV(path string, header []string) (*csvFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	c := &csvFile{path: path, f: f, w: csv.NewWriter(f)}
	got, err := csv.NewReader(f).Read()
	switch {
	case errors.Is(err, io.EOF):
		if err := c.w.Write(header); err != nil {
			f.Close()
			return nil, err
		}
	case err != nil:
		f.Close()
		return nil, fmt.Errorf("%s: reading its header: %w", path, err)
	case !slices.Equal(got, header):
		f.Close()
		return nil, fmt.Errorf("%s has other columns than this run writes (%s...): write to a new file", path, strings.Join(header[:min(4, len(header))], ","))
	}
	return c, nil
}

// write appends rows.
func (c *csvFile) write(rows [][]string) error {
	if err := c.w.WriteAll(rows); err != nil {
		return fmt.Errorf("writing %s: %w", c.path, err)
	}
	return nil
}

// close flushes and closes the file, returning the first error.
func (c *csvFile) close() error {
	c.w.Flush()
	err := c.w.Error()
	if cerr := c.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", c.path, err)
	}
	return nil
}

// exporter writes the -csv, -requests and -curve files. Safe for concurrent
// use; the first error sticks and is returned by close.
type exporter struct {
	mu                sync.Mutex
	rows, reqs, curve *csvFile
	err               error
	configV           []string
}

// openExports opens the files c's flags name.
func openExports(c *config) (*exporter, error) {
	e := &exporter{}
	cfg := map[string]string{}
	for _, kv := range c.configLines() {
		cfg[kv.Key] = kv.Value
	}
	for _, k := range csvConfig {
		e.configV = append(e.configV, cfg[k])
	}
	for _, out := range []struct {
		path   string
		header []string
		dst    **csvFile
	}{{c.flags.csv, csvHeader(), &e.rows}, {c.flags.requests, requestsHeader, &e.reqs}, {c.flags.curve, curveHeader, &e.curve}} {
		if out.path == "" {
			continue
		}
		f, err := openCSV(out.path, out.header)
		if err != nil {
			e.close()
			return nil, err
		}
		*out.dst = f
	}
	return e, nil
}

func (e *exporter) write(f *csvFile, rows [][]string) {
	if f == nil || len(rows) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err == nil {
		e.err = f.write(rows)
	}
}

// close closes every file and returns the first error of the whole run.
func (e *exporter) close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	errs := []error{e.err}
	for _, f := range []*csvFile{e.rows, e.reqs, e.curve} {
		if f != nil {
			errs = append(errs, f.close())
		}
	}
	e.err = errors.Join(errs...)
	return e.err
}

// exportRun is what one call of a sub-benchmark measured, kept until its
// -count run ends: testing prints only the last call's figures.
type exportRun struct {
	name string
	figs []figure // capacity: the searched rate as max-rate-req/s
	slo  string   // capacity: the objective, as -slo takes it
	n    int      // requests in the reported interval
	// answered is, over the wire to several servers, each one's responses
	// (its req/s figure is in figs).
	answered []uint64
	reqs     []requestRecord
	trials   [][]loadgen.Trial // capacity: one list per search
}

// rowOf returns the -csv row of r for -count run run.
func (e *exporter) rowOf(r *exportRun, run int) []string {
	row := []string{r.name, strconv.Itoa(run)}
	dims := nameDims(r.name)
	for _, d := range csvDims {
		row = append(row, dims[d])
	}
	row = append(row, e.configV...)
	row = append(row, strconv.Itoa(r.n))
	vals := map[string]string{}
	for _, f := range r.figs {
		vals[f.unit] = strconv.FormatFloat(f.value, 'g', -1, 64)
	}
	row = append(row, vals["ns/op"])
	for _, u := range units {
		row = append(row, vals[u.name])
	}
	var per []string
	if len(r.answered) > 1 {
		for i := range r.answered {
			per = append(per, vals[serverUnit(i)])
		}
	}
	return append(row, strings.Join(per, ";"), r.slo, vals["max-rate-req/s"])
}

// requestRows returns the -requests rows of r, in send order.
func requestRows(r *exportRun, run int) [][]string {
	recs := slices.Clone(r.reqs)
	slices.SortFunc(recs, func(a, b requestRecord) int {
		return cmp.Or(a.timing.Sent.Compare(b.timing.Sent), cmp.Compare(a.timing.ID, b.timing.ID))
	})
	if len(recs) == 0 {
		return nil
	}
	t0 := recs[0].timing.Sent
	at := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return strconv.FormatInt(int64(t.Sub(t0)), 10)
	}
	ns := func(d time.Duration) string { return strconv.FormatInt(int64(d), 10) }
	rows := make([][]string, 0, len(recs))
	for _, rec := range recs {
		t := rec.timing
		row := []string{r.name, strconv.Itoa(run), strconv.FormatUint(t.ID, 10), at(t.Sent), at(t.Admitted), at(t.Started), at(t.Done)}
		switch {
		case rec.err != nil:
			row = append(row, "", "", "", "", "", "", "")
		case rec.remote: // the server's own times are not known per request
			row = append(row, "", "", "", "", "", "", "")
		default:
			row = append(row, ns(t.Queue), ns(t.CopyIn), ns(t.Compute), ns(t.CopyOut), strconv.FormatBool(t.Device),
				strconv.Itoa(t.Worker), strconv.Itoa(t.Batch))
		}
		server := ""
		if rec.remote {
			server = strconv.Itoa(rec.server)
		}
		row = append(row, server)
		if rec.err != nil {
			row = append(row, rec.err.Error())
		} else {
			row = append(row, "")
		}
		rows = append(rows, row)
	}
	return rows
}

// curveRows returns the -curve rows of r.
func curveRows(r *exportRun, run int) [][]string {
	var rows [][]string
	for i, trials := range r.trials {
		for _, t := range trials {
			rows = append(rows, []string{r.name, strconv.Itoa(run), strconv.Itoa(i + 1), r.slo,
				strconv.FormatFloat(t.Rate, 'f', 1, 64), strconv.Itoa(t.Sent), strconv.Itoa(t.Failed), strconv.Itoa(t.Late),
				strconv.FormatInt(t.P50.Nanoseconds(), 10), strconv.FormatInt(t.Quantile.Nanoseconds(), 10), strconv.FormatBool(t.OK)})
		}
	}
	return rows
}

// export writes run run of r to every open file.
func (e *exporter) export(r *exportRun, run int) {
	if e == nil || r == nil {
		return
	}
	if e.rows != nil {
		e.write(e.rows, [][]string{e.rowOf(r, run)})
	}
	e.write(e.reqs, requestRows(r, run))
	e.write(e.curve, curveRows(r, run))
}

// nameDims returns the key=value parts of a benchmark name.
func nameDims(name string) map[string]string {
	dims := map[string]string{}
	for _, part := range strings.Split(name, "/") {
		if k, v, ok := strings.Cut(part, "="); ok {
			dims[k] = v
		}
	}
	return dims
}
