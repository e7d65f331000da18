#!/bin/bash
# One device call: CUDA shared-memory tests, then perf_analyzer with
# --shared-memory cuda vs system against one resnet18 server.
set -u
G=$PWD/.gpuz-cshm
OUT=${OUT:-/tmp/out}
W=/tmp/g
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
log() { echo "[$(el)s] $*" | tee -a "$OUT/summary.txt"; }
mkdir -p "$W" "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for f in inferbench root.test cuda.test protocol.test; do xz -dc "$G/$f.xz" >"$W/$f" && chmod +x "$W/$f"; done
tar xJf "$G/pa.tar.xz" -C "$W"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$OUT/gpu.txt" 2>&1
log "gpu: $(tail -1 "$OUT/gpu.txt")"

# The resnet18 server for perf_analyzer starts first: its warm-up (cuDNN
# algorithm search, graph capture) overlaps the tests.
"$W/inferbench" serve -backend cuda -precision fp16 -graphs -workers 2 -pipeline overlap -max-batch 256 -batches 1,32,256 \
	-http-addr 127.0.0.1:18000 -grpc-addr 127.0.0.1:18001 -metrics-addr "" -log json 2>"$OUT/serve.log" &
SP=$!

(cd inference/cuda && timeout 60 "$W/cuda.test" -test.run 'TestDeviceCopies|TestOpenIPCInThisProcess' -test.v) >"$OUT/cuda-test.log" 2>&1
log "cuda.test TestDeviceCopies|TestOpenIPCInThisProcess rc=$?"
timeout 60 "$W/root.test" -test.run 'TestCudaSharedMemoryAcrossProcesses' -test.v -serve-bin "$W/inferbench" >"$OUT/root-test.log" 2>&1
log "root.test TestCudaSharedMemoryAcrossProcesses rc=$?"
(cd inference/protocol && timeout 40 "$W/protocol.test" -test.run 'TestSharedMemoryOnCUDA' -test.v) >"$OUT/protocol-test.log" 2>&1
log "protocol.test TestSharedMemoryOnCUDA rc=$?"
timeout 50 "$W/root.test" -test.run '^$' -test.bench 'Server$' -test.benchtime 50x -backends cuda -batches 4 -workers 1 \
	-pipelines overlap -precisions fp16 -graphs on -model tiny -size 64x64 -transports grpc-shm,grpc-cudashm,http-cudashm \
	-serve-bin "$W/inferbench" >"$OUT/suite-bench.txt" 2>&1
log "suite grpc-shm,grpc-cudashm,http-cudashm (tiny 64x64) rc=$?"

for i in $(seq 1 150); do
	grep -q '"msg":"serving"' "$OUT/serve.log" && break
	kill -0 $SP 2>/dev/null || break
	sleep 1
done
log "resnet18 server: $(grep -c '"msg":"serving"' "$OUT/serve.log") serving line(s)"

export LD_LIBRARY_PATH=$W/lib:$LD_LIBRARY_PATH
pa() { # proto shm batch conc
	local url=127.0.0.1:18001 name=pa-$1-$2-b$3-c$4
	[ "$1" = http ] && url=127.0.0.1:18000
	if [ "$(el)" -gt 160 ]; then
		log "$name: skipped (time)"
		return
	fi
	timeout 20 "$W/perf_analyzer" -m resnet18 -u $url -i "$1" -b "$3" --concurrency-range "$4" --measurement-interval 500 \
		--shared-memory "$2" --output-shared-memory-size $((4 * $3 * 1000)) -f "$OUT/$name.csv" >"$OUT/$name.log" 2>&1
	log "$name rc=$? $(sed -n 2p "$OUT/$name.csv" 2>/dev/null | cut -d, -f1-2)"
}
for b in 1 32 256; do
	for shm in cuda system; do pa grpc $shm $b 1; done
done
for shm in cuda system; do pa http $shm 32 1; done
for b in 1 32; do
	for shm in cuda system; do pa grpc $shm $b 4; done
done
for shm in cuda system; do pa grpc $shm 256 2; done
python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:18000/v2/models/resnet18/stats").read().decode())' >"$OUT/stats.json" 2>&1
kill -TERM $SP
wait $SP
log "server exit rc=$?"
