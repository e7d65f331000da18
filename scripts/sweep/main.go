// Command sweep runs a named benchmark matrix of the root package's
// BenchmarkServer and records the results: the runner.sh of the seed.
//
// A sweep works in five steps:
//
//  1. Pick a matrix (-matrix seed, cpu-quick, gpu-full, loads, inputs,
//     batching, transports) and override any of its dimensions with
//     -backends, -batches, -workers, -pipelines, -precisions, -graphs,
//     -devices, -input, -batching, -loads and -transports (-input,
//     -batching and -transports are not passed to the suite unless the
//     matrix or the flag sets them).
//  2. Build the root test binary once (go test -c, with -tags cuda when the
//     matrix uses the cuda back-end), or take a prebuilt one with -bin: the
//     GPU machine has no Go toolchain.
//  3. Run the binary N times (-count N) with -test.bench '^BenchmarkServer$',
//     -test.count=1 and the matrix as the suite's own list flags, so that the
//     N rounds interleave all configurations and a drift in machine speed
//     hits all alike (-interleave=false: one run with -test.count=N, which
//     repeats each configuration back to back).
//  4. Show progress on stderr (k/N results, elapsed time, ETA) while the
//     output streams into results/tmp/.
//  5. Keep the config lines of the first round only (a new date: line would
//     split benchstat's tables), prepend ours (matrix, commit, date and
//     sweep-args, the flags after --, for keys the binary did not print) and
//     move the file to results/<gpu-or-cpu>/<name>.txt.
//
// With -deadline D no round starts that would end past D (judged by the
// slowest round so far); -append FILE adds rounds to an earlier file of the
// same sweep (its first line, flags after --, and commit) whose config lines
// all match the new rounds' (date: aside), so a sweep can span several
// sessions of a time-limited machine.
//
// Usage:
//
//	go run ./scripts/sweep -matrix seed -count 10 [-bin .gpu/root.test] [-- extra suite flags]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		// -h printed the usage: that is what was asked for.
	default:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
