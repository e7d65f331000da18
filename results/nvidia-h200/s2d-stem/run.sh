#!/bin/bash
# One device call for branch s2d16: parity, profiles (plain, s2d), end to end interleaved.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$SECONDS
LIMIT=${LIMIT:-113}
left() { echo $((LIMIT - (SECONDS - T0))); }
cap() { local l; l=$(left); if [ "$l" -gt "$1" ]; then echo "$1"; else echo "$l"; fi; }
B=.gpuz-s2d
LOG=$OUT/log.txt
for f in $B/*.xz; do
  if command -v xz >/dev/null; then xz -dk "$f"; else python3 -c "import lzma,sys; open(sys.argv[1][:-3],'wb').write(lzma.open(sys.argv[1]).read())" "$f"; fi
done
chmod +x $B/*.test
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; echo "unpacked at $((SECONDS-T0)) s"; } > $LOG 2>&1
step() { echo "== $1: rc=$2 at $((SECONDS-T0)) s" >> $LOG; }
# 1. parity (legacy convolutions), and the s2d kernels' bits
timeout $(cap 45) $B/cuda.test -test.run 'TestS2DInputKernelBits|TestS2DStemAgrees/.*/.*/convs=legacy' -test.v > $OUT/parity.txt 2>&1; step parity $?
# 2. profiles
P="-test.run ^TestProfile$ -profile-batches 256,32 -profile-precision fp16 -profile-input fp32,uint8 -profile-passes 11"
timeout $(cap 18) $B/cuda.test $P -profile $OUT/profile-plain.md >> $LOG 2>&1; step profile-plain $?
INFERBENCH_CUDA_STEM=s2d timeout $(cap 18) $B/cuda.test $P -profile $OUT/profile-s2d.md >> $LOG 2>&1; step profile-s2d $?
# 3. end to end, interleaved
S="-test.run ^$ -test.bench Server$ -backends cuda -batches 32,256 -workers 2 -pipelines overlap -precisions fp16 -graphs on -input fp32,uint8 -loads burst -test.benchtime 200x"
for r in 1 2; do
  for s in plain s2d; do
    [ "$(left)" -gt 8 ] || break 2
    echo "# run $r, INFERBENCH_CUDA_STEM=$s" >> $OUT/server-$s.txt
    INFERBENCH_CUDA_STEM=$s timeout $(cap 25) $B/root.test $S >> $OUT/server-$s.txt 2>&1; step "server $s run $r" $?
  done
done
# 4. if time is left: parity with graph-API convolutions, then the s2d profile with them
if [ "$(left)" -gt 25 ]; then
  timeout $(cap 40) $B/cuda.test -test.run 'TestS2DStemAgrees/.*/.*/convs=graph' -test.v >> $OUT/parity.txt 2>&1; step parity-graph $?
fi
if [ "$(left)" -gt 20 ]; then
  INFERBENCH_CUDA_STEM=s2d timeout $(cap 40) $B/cuda.test $P -profile-convs graph -profile $OUT/profile-s2d-graph.md >> $LOG 2>&1; step profile-s2d-graph $?
fi
rm -f $B/*.test
echo "done at $((SECONDS-T0)) s" >> $LOG
