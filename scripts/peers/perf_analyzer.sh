#!/usr/bin/env bash
# perf_analyzer.sh: Triton's perf_analyzer against one running v2 server, over
# a matrix of protocol, shared memory, batch size and concurrency, one
# perf_analyzer run (and one CSV file) per point.
#
# usage: scripts/peers/perf_analyzer.sh GRPC_HOST:PORT HTTP_HOST:PORT OUTDIR
#
# environment (defaults in brackets):
#   PA          the perf_analyzer binary [perf_analyzer]
#   MODEL       the model's name [resnet18]
#   PROTOCOLS   [grpc http]
#   SHM         perf_analyzer's --shared-memory values [none system]; cuda too
#               against a -backend cuda server (perf_analyzer then needs libcudart.so.12)
#   BATCHES     [1 32 256]
#   CONC_<B>    concurrencies for batch B [1 4]; CONC_256 [1 2]
#   CLASSES     the output's elements per image, to size output regions [1000]
#   INTERVAL_MS perf_analyzer's --measurement-interval [1000]
#   EXTRA       more perf_analyzer flags
#
# Each point writes OUTDIR/pa-<protocol>-<shm>-b<B>-c<C>.csv and .log;
# scripts/peers/pa2bench turns the CSV files into Go benchmark lines. A point
# that fails is logged and the matrix goes on; the script exits 1 at the end
# if any failed.
set -u -o pipefail
if [ $# -ne 3 ]; then
	sed -n 2,23p "$0" >&2
	exit 2
fi
grpc=$1 http=$2 out=$3
PA=${PA:-perf_analyzer}
MODEL=${MODEL:-resnet18}
PROTOCOLS=${PROTOCOLS:-grpc http}
SHM=${SHM:-none system}
BATCHES=${BATCHES:-1 32 256}
CLASSES=${CLASSES:-1000}
INTERVAL_MS=${INTERVAL_MS:-1000}
CONC_256=${CONC_256:-1 2}
mkdir -p "$out"
failed=0
i=0
for proto in $PROTOCOLS; do
	url=$grpc
	[ "$proto" = http ] && url=$http
	for shm in $SHM; do
		for b in $BATCHES; do
			var=CONC_$b
			for c in ${!var:-1 4}; do
				i=$((i + 1))
				name=pa-$proto-$shm-b$b-c$c
				# An output region per request in flight: batch x classes fp32.
				args=(-m "$MODEL" -u "$url" -i "$proto" -b "$b" --concurrency-range "$c"
					--measurement-interval "$INTERVAL_MS" --shared-memory "$shm"
					--output-shared-memory-size $((4 * b * CLASSES)) -f "$out/$name.csv")
				start=$(date +%s)
				# shellcheck disable=SC2086
				if "$PA" "${args[@]}" ${EXTRA:-} >"$out/$name.log" 2>&1; then
					tput=$(sed -n 2p "$out/$name.csv" | cut -d, -f2)
					echo "perf_analyzer [$i] $name: $tput samples/s ($(($(date +%s) - start)) s)"
				else
					echo "perf_analyzer [$i] $name: FAILED, last lines of $out/$name.log:" >&2
					tail -5 "$out/$name.log" >&2
					failed=1
				fi
			done
		done
	done
done
exit $failed
