#!/usr/bin/env bash
# The classifier head in kernels of ours (fat binaries), no cuBLAS (new) against 3ebc8c6 (old: cuBLAS, its first use on a goroutine):
# cold and warm starts, GPU tests, per-step profile, in-process throughput interleaved.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
V=/tmp/v23 R=/tmp/rec23 T=$(mktemp -d); mkdir -p $V $R
for f in cuda-new.test cuda-old.test inferbench-new inferbench-old root-new.test root-old.test; do xz -dc .gpuz23/$f.xz > $V/$f; chmod +x $V/$f; done
T0=$(date +%s); el() { echo $(($(date +%s) - T0)); }
log() { echo "[$(el)s] $*" | tee -a $R/summary.txt; tar -C $R -czf $OUT/rec23.tgz .; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
log "gpu $(cat $R/gpu.txt) $(cat .gpuz23/commit) nproc $(nproc)"
evict() { python3 - <<'PY'
import glob, os
n = 0
for pat in ['/usr/lib/x86_64-linux-gnu/libcudnn*', '/usr/local/cuda/lib64/libcublas*', '/usr/local/cuda/lib64/libnvrtc*',
            '/usr/lib/x86_64-linux-gnu/libcuda.so*', '/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler*',
            '/usr/lib/x86_64-linux-gnu/libnvidia-ml*', '/tmp/v23/inferbench-new', '/tmp/v23/inferbench-old']:
    for f in glob.glob(pat):
        fd = os.open(f, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd); n += 1
print("evicted", n, "files")
PY
}
srv() { # label binary env...
  local label=$1 bin=$2; shift 2
  env INFERBENCH_CUDA_TIMELINE=$R/tl-$label.txt "$@" $V/$bin serve -backend cuda -precision fp16 -graphs -workers 2 -pipeline overlap -max-batch 256 -batches 1,32,256 \
    -http-addr 127.0.0.1:18000 -grpc-addr 127.0.0.1:18001 -metrics-addr "" > $R/serve-$label.log 2>&1 &
  local pid=$! i
  for i in $(seq 1 400); do grep -q 'msg=warm-up' $R/serve-$label.log && break; kill -0 $pid 2>/dev/null || break; sleep 0.05; done
  kill -TERM $pid 2>/dev/null; wait $pid
  log "$label: $(grep -o 'msg=warm-up.*' $R/serve-$label.log | grep -o ' total=[^ ]*\| load=[^ ]*\| setup.init=[^ ]*\| setup.plan=[^ ]*\| setup.capture=[^ ]*' | tr -d '\n')"
}
# 1. starts: the machine's first process, libraries evicted, fresh caches (new); then warm starts alternating
evict >> $R/summary.txt
srv first-evicted-new inferbench-new INFERBENCH_CUDNN_CACHE=$T/a.json CUDA_CACHE_PATH=$T/j
for i in 1 2 3 4 5 6; do
  srv old-$i inferbench-old INFERBENCH_CUDNN_CACHE=$T/a.json CUDA_CACHE_PATH=$T/j
  srv new-$i inferbench-new INFERBENCH_CUDNN_CACHE=$T/a.json CUDA_CACHE_PATH=$T/j
done
# a start with the libraries evicted and empty caches again, each binary (not the machine's first process)
for b in old new; do evict >/dev/null; srv evicted-$b inferbench-$b INFERBENCH_CUDNN_CACHE=$T/e-$b.json CUDA_CACHE_PATH=$T/je-$b; done
# 2. the whole cuda test package (new)
(cd inference/cuda && timeout 170 $V/cuda-new.test -test.v -test.timeout 165s) > $R/tests-cuda.txt 2>&1
log "cuda tests rc=$? $(grep -c -- '^--- PASS' $R/tests-cuda.txt) pass $(grep -c -- '--- FAIL' $R/tests-cuda.txt) fail $(grep -c -- '--- SKIP' $R/tests-cuda.txt) skip"
grep -B3 -A15 -- '--- FAIL' $R/tests-cuda.txt | head -60
# 3. per-step profile, old and new
for b in old new; do
  (cd inference/cuda && INFERBENCH_CUDNN_CACHE=$T/a.json timeout 60 $V/cuda-$b.test -test.run '^TestProfile$' -profile $R/profile-$b.md -profile-batches 256,32,1 -profile-precision fp16 -profile-input fp32 -profile-passes 11) > $R/profile-$b.txt 2>&1
  log "profile $b rc=$?"
done
grep -h "average pool\|feature conv\|classifier\|^| total\|forward" $R/profile-old.md $R/profile-new.md | head -30
# 4. in process, interleaved
A="-backends cuda -pipelines overlap -precisions fp16 -graphs on -loads burst -workers 2 -batches 1,32,256 -input fp32 -test.benchtime 300x -test.count 1"
for r in 1 2 3; do for b in old new; do
  echo "# $b root.test -test.bench Server\$ $A" >> $R/inproc-$b.txt
  INFERBENCH_CUDNN_CACHE=$T/a.json $V/root-$b.test -test.run '^$' -test.bench 'Server$' $A >> $R/inproc-$b.txt 2>&1
  log "inproc $b rc=$? $(grep ^Benchmark $R/inproc-$b.txt | tail -3 | awk '{for(i=1;i<=NF;i++) if($i=="samples/s") printf " %s", $(i-1)}')"
done; done
