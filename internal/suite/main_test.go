package suite

import (
	"flag"
	"os"
	"testing"
)

// self marks a run of this test binary by its own tests (suiteBinary): only
// then do the benchmarks below run, so that go test -bench ./... measures
// the suite once, at the module's root.
var self = flag.Bool("suite-self", false, "run the suite's benchmarks (set by the suite's own tests)")

func TestMain(m *testing.M) {
	Register(flag.CommandLine)
	os.Exit(Main(m))
}

func skipUnlessSelf(b *testing.B) {
	if !*self {
		b.Skip("the suite's benchmarks run at the module's root: go test -bench . .")
	}
}

func BenchmarkServer(b *testing.B)         { skipUnlessSelf(b); Server(b) }
func BenchmarkScenario(b *testing.B)       { skipUnlessSelf(b); Scenario(b) }
func BenchmarkServerOverhead(b *testing.B) { skipUnlessSelf(b); ServerOverhead(b) }
func BenchmarkCapacity(b *testing.B)       { skipUnlessSelf(b); Capacity(b) }
