// Command inferbench serves a ResNet over the network with the Open Inference
// Protocol (KServe v2), over HTTP/REST and gRPC, with Prometheus metrics.
//
//	inferbench serve [flags]
//	inferbench bench [flags]
//
// With no flags it serves the embedded seeded ResNet-18 on the CPU at
// :8000 (HTTP), :8001 (gRPC) and :8002 (metrics, and health again);
// -tls-cert and -tls-key put HTTP and gRPC behind TLS. `inferbench serve -h`
// lists every flag. SIGINT or SIGTERM drains: readiness turns false at once,
// accepted requests are answered, then the process exits 0 (1 if the grace
// period ran out first).
//
// bench runs the benchmark suite of the module's root (internal/suite)
// against an in-process server, serve processes it starts, or running v2
// servers (-target), as perf_analyzer does, and prints the benchmark lines
// go test -bench prints; `inferbench bench -h` lists its flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/inferbench/inferbench/internal/suite"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// errUsage marks a command-line mistake (exit status 2); its message was
// printed already.
var errUsage = errors.New("usage")

func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintf(stderr, "inferbench: %v\n", err)
	return 1
}

const usage = `usage: inferbench <command> [flags]

commands:
  serve   serve a ResNet over HTTP and gRPC (Open Inference Protocol), with metrics
  bench   run the benchmark suite against this process's server or a v2 server (-target)

Run 'inferbench <command> -h' for the command's flags.
`

// run runs one command until it finishes or ctx ends (a signal), which
// makes serve drain.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr)
	case "bench":
		if err := suite.Bench(ctx, args[1:], stdout, stderr); errors.Is(err, suite.ErrUsage) {
			return errUsage // its message was printed
		} else if err != nil {
			return err
		}
		return nil
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "inferbench: unknown command %q\n\n%s", args[0], usage)
	return errUsage
}
