#!/usr/bin/env bash
# CPU side by side: our BenchmarkForward (inference/cpu) and PyTorch's and
# onnxruntime's forward pass (scripts/pytorch_cpu_bench.py), interleaved in
# rounds, each process pinned with taskset to as many CPUs as it has threads,
# printed as one Go benchmark file:
#
#   go test -c -o .gpu/cpu.test ./inference/cpu        # here (Go), then on the machine:
#   CPU_TEST=.gpu/cpu.test scripts/cpu-compare.sh > cpu.txt
#   go tool benchstat -col /backend cpu.txt
#
# Environment (defaults in brackets):
#   CPU_TEST   our test binary [.gpu/cpu.test]
#   THREADS    thread counts [2 16]
#   BATCHES    batch sizes [1,8]
#   ROUNDS     rounds; each runs every back-end at every thread count [6]
#   COUNT      measurements of each configuration per process and round [1]
#   BENCHTIME  seconds of timed passes per measurement [1]
#   BACKENDS   the others, may be empty [pytorch onnxruntime]
#   PYTHON     [python3]
#
# CPU choice: the CPUs of a run are the first N of the list that takes one
# hardware thread of every physical core before the second thread of any
# (from lscpu -p), so two threads run on two cores, not on the two hardware
# threads of one. Per round the back-ends' order rotates, so a drift in the
# machine's speed does not always fall on the same one.
set -euo pipefail
cd "$(dirname "$0")/.."

CPU_TEST=${CPU_TEST:-.gpu/cpu.test}
THREADS=${THREADS:-2 16}
BATCHES=${BATCHES:-1,8}
ROUNDS=${ROUNDS:-6}
COUNT=${COUNT:-1}
BENCHTIME=${BENCHTIME:-1}
BACKENDS=${BACKENDS-pytorch onnxruntime}
PYTHON=${PYTHON:-python3}

# cpus N prints the first N CPUs, one hardware thread per core first.
cpus() {
	lscpu -p=CPU,CORE,SOCKET | grep -v '^#' | awk -F, '
		{ key = $3 "," $2; rank = seen[key]++; print rank, $3, $2, $1 }' |
		sort -n -k1,1 -k2,2 -k3,3 | head -n "$1" | awk '{ print $4 }' | paste -sd, -
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The cpu: line our binary prints, so PyTorch's results join ours in one table.
cpu_line=$("$CPU_TEST" -test.run '^$' -test.bench '^$' 2>/dev/null | sed -n 's/^cpu: //p' | head -1)
if [ -z "$cpu_line" ]; then
	cpu_line=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
fi

echo "# cpu-compare: threads '$THREADS', batches $BATCHES, rounds $ROUNDS, count $COUNT, benchtime ${BENCHTIME}s, back-ends cpu $BACKENDS"
for t in $THREADS; do
	echo "# threads=$t runs on CPUs $(cpus "$t")"
done
lscpu | sed 's/^/# lscpu: /'

if [[ " $BACKENDS " == *" onnxruntime "* ]]; then
	"$PYTHON" scripts/pytorch_cpu_bench.py --export "$tmp/onnx" --batches "$BATCHES" >&2
fi

run() { # run BACKEND THREADS
	local list
	list=$(cpus "$2")
	if [ "$1" = cpu ]; then
		GOMAXPROCS=$2 taskset -c "$list" "$CPU_TEST" -test.run '^$' -test.bench '^BenchmarkForward$' \
			-test.benchtime "${BENCHTIME}s" -test.count "$COUNT" -batches "$BATCHES" | grep -v '^PASS$'
	else
		taskset -c "$list" "$PYTHON" scripts/pytorch_cpu_bench.py --backend "$1" --threads "$2" \
			--batches "$BATCHES" --benchtime "$BENCHTIME" --count "$COUNT" --onnx "$tmp/onnx" --cpu "$cpu_line"
	fi
}

read -r -a order <<<"cpu $BACKENDS"
for ((r = 1; r <= ROUNDS; r++)); do
	echo "# round $r: ${order[*]}" >&2
	for t in $THREADS; do
		for b in "${order[@]}"; do
			run "$b" "$t"
		done
	done
	order=("${order[@]:1}" "${order[0]}")
done
