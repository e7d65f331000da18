#!/bin/sh
# A stand-in for the root test binary: prints config lines as the suite does
# (FAKEBENCH_GPU changes the gpu: line), Unit lines and one result per batch
# size and round, in the Go benchmark format. Its arguments go to stderr.
count=1
batches=1
for a in "$@"; do
	case "$a" in
	-test.count=*) count=${a#-test.count=} ;;
	-batches=*) batches=$(echo "${a#-batches=}" | tr , ' ') ;;
	-fail) echo "--- FAIL: BenchmarkServer"; exit 1 ;;
	esac
done
echo "fakebench args: $*" >&2
sleep "${FAKEBENCH_SLEEP:-0}"
echo "backend: cuda"
echo "gomaxprocs: 16"
echo "gpu: ${FAKEBENCH_GPU:-NVIDIA H200}"
echo "Unit samples/s better=higher"
echo "goos: linux"
echo "goarch: amd64"
echo "pkg: github.com/inferbench/inferbench"
echo "cpu: Fake CPU @ 1.00GHz"
i=0
while [ "$i" -lt "$count" ]; do
	for b in $batches; do
		printf 'BenchmarkServer/backend=cuda/batch=%s/workers=1/pipeline=serial/precision=fp32/graphs=off/devices=1/load=burst \t100\t1000000 ns/op\t%s000 samples/s\n' "$b" "$b"
	done
	i=$((i + 1))
done
echo "    bench_test.go:1: a test log line"
echo PASS
