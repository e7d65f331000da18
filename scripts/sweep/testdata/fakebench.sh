#!/bin/sh
# A stand-in for the root test binary: prints config lines, Unit lines and
# one result per batch size and round, in the Go benchmark format.
count=1
batches=1
for a in "$@"; do
	case "$a" in
	-test.count=*) count=${a#-test.count=} ;;
	-batches=*) batches=$(echo "${a#-batches=}" | tr , ' ') ;;
	-fail) echo "--- FAIL: BenchmarkServer"; exit 1 ;;
	esac
done
sleep "${FAKEBENCH_SLEEP:-0}"
echo "goos: linux"
echo "goarch: amd64"
echo "pkg: github.com/inferbench/inferbench"
echo "cpu: Fake CPU @ 1.00GHz"
echo "gpu: NVIDIA H200"
echo "args: $*"
echo "Unit samples/s better=higher"
i=0
while [ "$i" -lt "$count" ]; do
	for b in $batches; do
		printf 'BenchmarkServer/backend=cuda/batch=%s/workers=1/pipeline=serial/precision=fp32/graphs=off/devices=1/load=burst \t100\t1000000 ns/op\t%s000 samples/s\n' "$b" "$b"
	done
	i=$((i + 1))
done
echo "    bench_test.go:1: a test log line"
echo PASS
