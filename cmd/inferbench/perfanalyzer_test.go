package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// needPerfAnalyzer finds Triton's perf_analyzer ($INFERBENCH_PERF_ANALYZER,
// else on PATH): it skips without one, or fails when INFERBENCH_PEERS_REQUIRE=1
// (CI installs it with scripts/peers/install-perf-analyzer.sh and sets both).
func needPerfAnalyzer(t *testing.T) string {
	t.Helper()
	path := os.Getenv("INFERBENCH_PERF_ANALYZER")
	var err error
	if path == "" {
		path, err = exec.LookPath("perf_analyzer")
	} else if _, err = os.Stat(path); err == nil {
		// perf_analyzer with no arguments prints its usage; a missing
		// library shows here instead.
		out, _ := exec.Command(path).CombinedOutput()
		if !strings.Contains(string(out), "Usage") {
			err = fmt.Errorf("%s does not run: %s", path, out)
		}
	}
	if err != nil {
		if os.Getenv("INFERBENCH_PEERS_REQUIRE") == "1" {
			t.Fatalf("perf_analyzer is required (INFERBENCH_PEERS_REQUIRE=1): %v", err)
		}
		t.Skipf("Triton's perf_analyzer is not installed (%v): scripts/peers/install-perf-analyzer.sh DIR, then INFERBENCH_PERF_ANALYZER=DIR/perf_analyzer", err)
	}
	return path
}

// TestPerfAnalyzer drives the real command on the CPU back-end with Triton's
// perf_analyzer over gRPC (ModelInfer, and ModelStreamInfer with
// --streaming) and HTTP, with and without system shared memory: it
// must measure without an error, report a throughput, find the server's
// statistics (its "Server:" section, from the statistics extension) with as
// many inferences as it counted requests times the batch, and leave no
// shared-memory region behind. Shared memory is fenced by a required
// header, which perf_analyzer sends with every call (-H); it names its
// objects after the tensors, so the server takes any key
// (-shm-key-prefix=).
func TestPerfAnalyzer(t *testing.T) {
	pa := needPerfAnalyzer(t)
	const batch = 2
	const header, value = "inferbench-shm-key", "s3cret"
	s := startServer(t, "-model", "tiny", "-size", "32x32", "-max-batch", "4", "-workers", "2",
		"-shm", "-shm-key-prefix=", "-shm-header", header+"="+value)
	dir := t.TempDir()
	requests := regexp.MustCompile(`Client:\s+Request count: (\d+)`)
	inferences := regexp.MustCompile(`Server:\s+Inference count: (\d+)`)
	// grpc-stream is perf_analyzer's --streaming: ModelStreamInfer.
	for _, proto := range []string{"grpc", "grpc-stream", "http"} {
		for _, shm := range []string{"none", "system"} {
			t.Run(proto+"/"+shm, func(t *testing.T) {
				addr, args := s.grpc, []string{"-i", "grpc"}
				switch proto {
				case "http":
					addr, args = s.http, []string{"-i", "http"}
				case "grpc-stream":
					args = append(args, "--streaming")
				}
				csvPath := filepath.Join(dir, proto+"-"+shm+".csv")
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, pa, append(args, "-m", "tiny", "-u", addr, "-b", strconv.Itoa(batch),
					"--concurrency-range", "2", "--measurement-interval", "300", "--max-trials", "10",
					// Any three windows will do: this checks that it works,
					// not what it measures on a busy CI machine.
					"--stability-percentage", "999",
					"--shared-memory", shm, "--output-shared-memory-size", strconv.Itoa(4*batch*5), "-H", header+":"+value, "-f", csvPath)...)
				out, err := cmd.CombinedOutput()
				t.Logf("perf_analyzer:\n%s", out)
				require.NoError(t, err, "server log:\n%s", s.logText())

				f, err := os.Open(csvPath)
				require.NoError(t, err)
				defer f.Close()
				rows, err := csv.NewReader(f).ReadAll()
				require.NoError(t, err)
				require.Len(t, rows, 2, "a header and one concurrency")
				require.Equal(t, "Inferences/Second", rows[0][1])
				perSecond, err := strconv.ParseFloat(rows[1][1], 64)
				require.NoError(t, err)
				assert.Positive(t, perSecond)

				// The counts of perf_analyzer's last (stable) measurement.
				reqs, infs := requests.FindAllSubmatch(out, -1), inferences.FindAllSubmatch(out, -1)
				require.NotEmpty(t, reqs, "perf_analyzer printed no client request count")
				require.NotEmpty(t, infs, "perf_analyzer found no server statistics")
				nReq, _ := strconv.Atoi(string(reqs[len(reqs)-1][1]))
				nInf, _ := strconv.Atoi(string(infs[len(infs)-1][1]))
				assert.Positive(t, nReq)
				// The server counts the window's requests as perf_analyzer
				// delimits them with two statistics snapshots, taken while
				// its workers go on sending: requests answered between a
				// snapshot and the client's clock fall on either side, more
				// of them on a busy machine.
				slack := max(2*2*batch, batch*nReq/20)
				assert.InDelta(t, batch*nReq, nInf, float64(slack), "server inferences against client requests x batch")

				req, err := http.NewRequest(http.MethodGet, "http://"+s.http+"/v2/systemsharedmemory/status", nil)
				require.NoError(t, err)
				req.Header.Set(header, value)
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				var regions []any
				require.Equal(t, http.StatusOK, resp.StatusCode)
				require.NoError(t, json.NewDecoder(resp.Body).Decode(&regions))
				assert.Empty(t, regions, "perf_analyzer unregistered its regions")
			})
		}
	}
	err, _ := s.stop(t)
	require.NoError(t, err, "exit after SIGTERM\n%s", s.logText())
}
