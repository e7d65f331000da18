// Command traceplot renders a Chrome trace event JSON file (as written by
// inference/trace) to a PNG timeline, so a trace can be looked at, and
// committed as a picture, without a browser.
//
// It works in four steps:
//
//  1. Read the trace: the JSON object format ({"traceEvents": [...]}) or a
//     bare array of events. Complete events ("ph":"X") are drawn; process and
//     thread names and sort indices come from the metadata events ("ph":"M");
//     every other event is ignored.
//  2. Keep the events inside the -from/-to window (microseconds, as in the
//     file) on threads whose "process: thread" label matches -threads.
//  3. Lay out one row per thread, ordered as Perfetto orders them (process
//     sort index, pid, thread sort index, tid), and one box per event, at
//     least two pixels wide; a box's colour says its event name (queue grey,
//     h2d blue, compute green, d2h orange, deliver purple).
//  4. Draw the rows, boxes, a legend and a time axis, and write the PNG.
//
// Usage:
//
//	go run ./scripts/traceplot [-o trace.png] [-width 1600] [-from us] [-to us] [-threads regexp] [-title text] trace.json
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		// -h printed the usage: that is what was asked for.
	default:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

// options are the parsed command line.
type options struct {
	in, out  string
	width    int
	from, to float64 // window in µs; to is +Inf for "to the end"
	threads  *regexp.Regexp
	title    string
}

func parseArgs(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("traceplot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.out, "o", "trace.png", "the PNG file to write")
	fs.IntVar(&o.width, "width", 1600, "image width in pixels")
	fs.Float64Var(&o.from, "from", 0, "start of the window, in µs of the trace's time axis")
	fs.Float64Var(&o.to, "to", math.Inf(1), "end of the window, in µs (default: the last event's end)")
	threads := fs.String("threads", "", "draw only rows whose \"process: thread\" label matches this regexp")
	fs.StringVar(&o.title, "title", "", "title above the timeline (default: the input file name)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return o, errors.New("traceplot: want exactly one trace file")
	}
	o.in = fs.Arg(0)
	if o.title == "" {
		o.title = o.in
	}
	if o.width < 200 {
		return o, fmt.Errorf("traceplot: -width %d is below 200 pixels", o.width)
	}
	if !(o.to > o.from) {
		return o, fmt.Errorf("traceplot: empty window: -from %g -to %g", o.from, o.to)
	}
	if *threads != "" {
		re, err := regexp.Compile(*threads)
		if err != nil {
			return o, fmt.Errorf("traceplot: -threads: %w", err)
		}
		o.threads = re
	}
	return o, nil
}

// run renders the trace named in args to a PNG and prints a one-line summary
// to stdout.
func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseArgs(args, stderr)
	if err != nil {
		return err
	}
	f, err := os.Open(o.in)
	if err != nil {
		return fmt.Errorf("traceplot: %w", err)
	}
	tr, err := readTrace(f)
	f.Close()
	if err != nil {
		return err
	}
	c := newChart(tr, o)
	if len(c.rows) == 0 {
		return fmt.Errorf("traceplot: %s: no complete events in the window", o.in)
	}
	img := c.draw()
	if err := writePNG(o.out, img); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %d rows, %d boxes, %.1f µs to %.1f µs, %dx%d pixels\n",
		o.out, len(c.rows), c.boxes(), c.from, c.to, img.Bounds().Dx(), img.Bounds().Dy())
	return nil
}
