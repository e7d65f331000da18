#!/usr/bin/env bash
# gpu-ours.sh: on the GPU machine, in one call, the field's tools and our
# suite measure one `inferbench serve` (cuda, fp16, CUDA graphs, 2 overlap
# workers), point by point:
#   1. for each transport (grpc, grpc-shm, http, http-shm): perf_analyzer at
#      batch 1, 32 and 256 and concurrency 1, 2 and 4, then our suite
#      (-target) at the same points, back to back;
#   2. MLPerf LoadGen (scripts/peers/loadgen_sut.py) SingleStream, Server and
#      Offline over gRPC with system shared memory, then our suite with the
#      loads BenchmarkScenario maps those scenarios to.
#
# usage (repository root on the GPU machine, the bundle carried):
#   B=.gpuz OUT=$OUT scripts/peers/gpu-ours.sh
# B holds: inferbench and root.test (built here with -tags cuda) and
# peers.tar.xz (perf_analyzer from tritonclient 2.50.0's wheel with libb64
# and libcudart.so.12, and Python 3.12 wheels: mlcommons-loadgen, tritonclient
# and what it imports that the GPU image lacks); scripts/peers/README.md says
# how to make it.
# environment: SERVER_QPS (LoadGen Server target, 4000), BOUND_MS (its p99
# bound, 10), OFFLINE_QPS (LoadGen's Offline expectation, 40000), DURATION_MS
# (LoadGen's minimum duration, 10000), WINDOW (our suite's window, 1s),
# INTERVAL_MS (perf_analyzer's, 1000), BATCHES ("1 32 256"), SERVE_FLAGS
# (the server's, "-backend cuda -precision fp16 -graphs -workers 2 -pipeline
# overlap"), MODEL (the name it serves the model under, and every tool asks
# for, resnet18); PA set to a perf_analyzer binary skips unpacking the bundle, for
# a run with tools installed here (PYTHONPATH and LD_LIBRARY_PATH yours).
set -u -o pipefail
B=${B:-.gpuz}
OUT=${OUT:?set OUT to the output folder}
SERVER_QPS=${SERVER_QPS:-4000}
BOUND_MS=${BOUND_MS:-10}
WINDOW=${WINDOW:-1s}
SERVE_FLAGS=${SERVE_FLAGS:--backend cuda -precision fp16 -graphs -workers 2 -pipeline overlap}
export MODEL=${MODEL:-resnet18}
BATCHES=${BATCHES:-1 32 256}
MAX_BATCH=${BATCHES##* }
OFFLINE_QPS=${OFFLINE_QPS:-40000}
DURATION_MS=${DURATION_MS:-10000}
export INTERVAL_MS=${INTERVAL_MS:-1000}
P=/tmp/peers
mkdir -p "$P" "$OUT"
if [ -z "${PA:-}" ]; then
	tar -C "$P" -xJf "$B/peers.tar.xz"
	python3 -m pip install -q --no-index --no-deps --target "$P/py" "$P"/wheels/*.whl || exit 1
	export PYTHONPATH=$P/py
	export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$P/lib
	export PA=$P/perf_analyzer
fi
log=$OUT/gpu-ours.log
exec > >(tee -a "$log") 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
"$PA" --version 2>&1 | head -1 || true

# Shared memory on for the -shm transports; perf_analyzer names its objects
# after the tensors, so any key is taken (-shm-key-prefix=), on loopback.
# shellcheck disable=SC2086
"$B/inferbench" serve $SERVE_FLAGS -model-name "$MODEL" -max-batch "$MAX_BATCH" -batches "${BATCHES// /,}" -max-queue 4096 \
	-shm -shm-key-prefix= -http-addr 127.0.0.1:8000 -grpc-addr 127.0.0.1:8001 -metrics-addr 127.0.0.1:8002 >"$OUT/serve.log" 2>&1 &
server=$!
for _ in $(seq 120); do
	grep -q 'msg=serving' "$OUT/serve.log" && break
	sleep 0.5
done
grep 'warm-up\|serving' "$OUT/serve.log"

suite() { # suite TARGET TRANSPORT: our suite at perf_analyzer's points
	"$B/root.test" -test.run '^$' -test.bench 'Server$' -test.benchtime 1x -target "$1" -transports "$2" -model-name "$MODEL" \
		-batches "${BATCHES// /,}" -loads closed -concurrency 1,2,4 -window "$WINDOW" -window-requests 10 -max-windows 6
}
export BATCHES CONC_1="1 2 4" CONC_32="1 2 4" CONC_256="1 2 4"
mkdir -p "$P/pa"
for t in grpc grpc-shm http http-shm; do
	proto=${t%-shm}
	shm=none
	[ "$t" != "$proto" ] && shm=system
	echo "== $t: perf_analyzer"
	PROTOCOLS=$proto SHM=$shm scripts/peers/perf_analyzer.sh 127.0.0.1:8001 127.0.0.1:8000 "$P/pa"
	echo "== $t: our suite"
	suite "$proto://127.0.0.1:$([ "$proto" = grpc ] && echo 8001 || echo 8000)" "$t" >>"$OUT/suite-server.txt" 2>>"$P/suite.err"
	grep -c '^Benchmark' "$OUT/suite-server.txt"
done
tar -C "$P" -czf "$OUT/perf_analyzer.tgz" pa

echo "== LoadGen"
for sc in SingleStream Server Offline; do
	python3 scripts/peers/loadgen_sut.py --url 127.0.0.1:8001 --model "$MODEL" --scenario "$sc" --outdir "$P/loadgen/$sc" \
		--server-qps "$SERVER_QPS" --latency-bound-ms "$BOUND_MS" --offline-qps "$OFFLINE_QPS" --batch-sample "$MAX_BATCH" --inflight 8 --duration-ms "$DURATION_MS"
done
echo "== our suite, LoadGen's scenarios as loads (BenchmarkScenario's mapping; it does not take -target)"
# SingleStream is batch=1/load=closed/concurrency=1 above; Server is an open
# Poisson load of 1-image requests at the same rate; Offline a burst of
# 256-image requests (1,200 of them).
"$B/root.test" -test.run '^$' -test.bench 'Server$' -test.benchtime 1x -target grpc://127.0.0.1:8001 -transports grpc-shm -model-name "$MODEL" \
	-batches 1 -loads open -rate "$SERVER_QPS" -window 2s -max-windows 6 >"$OUT/suite-scenarios.txt" 2>>"$P/suite.err"
"$B/root.test" -test.run '^$' -test.bench 'Server$' -test.benchtime 1200x -target grpc://127.0.0.1:8001 -transports grpc-shm -model-name "$MODEL" \
	-batches "$MAX_BATCH" -loads burst >>"$OUT/suite-scenarios.txt" 2>>"$P/suite.err"
grep '^Benchmark' "$OUT/suite-scenarios.txt" | cut -c1-160
tail -5 "$P/suite.err"
tar -C "$P" -czf "$OUT/loadgen.tgz" loadgen
kill -TERM $server
wait $server
echo "server exit: $?"
