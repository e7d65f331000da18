#!/usr/bin/env bash
# Device call 1 (cpu17): topology, per-vCPU throughput alone / in pairs / all busy,
# per-layer forward timing at 2..16 threads, conv layer shapes at 2 and 16 threads.
# Run from the repository root with the binaries (go test -c -ldflags='-s -w') of
# ./inference/cpu and ./inference/internal/conv, xz-compressed, in .gpuz-cpu17/.
set -u
D=.gpuz-cpu17
cd "$(dirname "$0")/.." 
unxz -k -f $D/cpu.test.xz $D/conv.test.xz
chmod +x $D/cpu.test $D/conv.test
O=$OUT
{
  echo "# date $(date -u +%FT%TZ)"; nproc; lscpu; lscpu -e
  for c in /sys/devices/system/cpu/cpu[0-9]*; do echo "$c siblings=$(cat $c/topology/thread_siblings_list 2>/dev/null) core=$(cat $c/topology/core_id 2>/dev/null)"; done
  grep -E '^(processor|core id|apicid|physical id|cpu MHz)' /proc/cpuinfo | paste - - - - -
  nvidia-smi -L 2>/dev/null
  uptime
} > $O/topo.txt 2>&1
LB="Layer/kernel=avx512/batch=1/layer=stage3/algo=direct"
one() { GOMAXPROCS=1 taskset -c $1 $D/conv.test -test.run '^$' -test.bench "$LB" -test.benchtime ${2:-1s} 2>&1 | awk -v c=$1 '/GFLOP/ {print "cpu" c, $(NF-1), "GFLOP/s"}'; }
{
  echo "# single-thread stage3 direct conv, GFLOP/s per process; 'alone', then cpu0 with cpuJ at once, then N at once"
  echo "## alone"; one 0; one 1; one 8
  for j in $(seq 1 15); do echo "## pair 0,$j"; one 0 & one $j & wait; done
  for n in 2 4 8 16; do echo "## all of 0-$((n-1)) at once"; for c in $(seq 0 $((n-1))); do one $c & done; wait; done
} > $O/siblings.txt 2>&1
echo "siblings done $(date -u +%T)" >&2
{
  for t in 2 4 8 16; do
    GOMAXPROCS=$t taskset -c 0-$((t-1)) $D/cpu.test -test.run '^$' -test.bench '^BenchmarkForwardLayers$' -test.benchtime 3s -batches 1,8
  done
  GOMAXPROCS=2 taskset -c 0,8 $D/cpu.test -test.run '^$' -test.bench '^BenchmarkForwardLayers$' -test.benchtime 3s -batches 8 | sed 's/threads=2/threads=2cpus0,8/'
} > $O/forward-layers.txt 2>&1
echo "layers done $(date -u +%T)" >&2
GOMAXPROCS=16 taskset -c 0-15 $D/cpu.test -test.run '^$' -test.bench '^BenchmarkForward$' -test.benchtime 3s -batches 8 -test.cpuprofile $O/cpu16.prof > $O/prof-run.txt 2>&1
for t in 2 16; do
  GOMAXPROCS=$t taskset -c 0-$((t-1)) $D/conv.test -test.run '^$' -test.bench 'Layer/kernel=avx512/batch=[18]/' -test.benchtime 8x
done > $O/conv-layers.txt 2>&1
echo "all done $(date -u +%T)" >&2
