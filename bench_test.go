package inferbench_test

import (
	"flag"
	"os"
	"testing"

	"github.com/inferbench/inferbench/internal/suite"
)

// The benchmark suite lives in internal/suite; these are its entry points
// for go test -bench, which stays its primary interface. go test -args
// -help lists its flags.
func init() { suite.Register(flag.CommandLine) }

// TestMain validates the suite's flags (exit 2 naming the flag when one is
// wrong), prints the config and Unit lines, runs and closes the exports.
func TestMain(m *testing.M) { os.Exit(suite.Main(m)) }

// BenchmarkServer measures the server end to end over the matrix of the
// suite's flags, in process, over the wire transports or against -target.
func BenchmarkServer(b *testing.B) { suite.Server(b) }

// BenchmarkScenario runs MLPerf LoadGen's scenarios; only when named
// (-bench Scenario).
func BenchmarkScenario(b *testing.B) { suite.Scenario(b) }

// BenchmarkServerOverhead measures what the server itself costs per request
// on the zero-cost nop back-end.
func BenchmarkServerOverhead(b *testing.B) { suite.ServerOverhead(b) }

// BenchmarkCapacity searches for the highest rate within the -slo; only when
// named (-bench Capacity -benchtime 1x).
func BenchmarkCapacity(b *testing.B) { suite.Capacity(b) }
