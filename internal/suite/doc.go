// Package suite is the benchmark harness of inferbench: the matrix of
// server configurations, the servers it measures (in process, `inferbench
// serve` processes it starts, or running v2 servers), the measurement and
// the export of its figures. The module root's bench_test.go holds thin
// Benchmark functions over it, so that `go test -bench` stays its primary
// interface; `inferbench bench` runs it as a command.
//
// A run goes:
//
//  1. Register defines the suite's flags (flags.go, transports.go) on the
//     test binary's flag set; Main validates them all before anything
//     starts, naming the flag of the first bad one, and prints the config
//     and Unit lines that head the output (config.go).
//  2. Each benchmark's matrix (dims.go) is the cross product of its
//     dimensions, whose values the flags give; each point is one
//     sub-benchmark, named key=value. runSubs (run.go) hands them to
//     b.Run; the bench command (command.go) runs the same ones itself.
//  3. Each sub-benchmark's -count run gets servers of its own: an
//     in-process inference.Server (servers.go) or, over a wire transport,
//     a fleet (fleet.go) of serve processes (serve.go) or -target servers,
//     reached by the protocol clients (remote.go).
//  4. measure (measure.go) warms them up, runs the load generator's load
//     and reads the servers' own figures; the figures become the metrics
//     of the benchmark line, and -csv, -requests and -curve rows
//     (export.go). Progress and, at the end, a summary of each
//     configuration go to stderr (run.go).
//
// The server must not import this package (inference/deps_test.go).
package suite
