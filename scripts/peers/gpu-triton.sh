#!/usr/bin/env bash
# gpu-triton.sh: on the GPU machine, in one call, our server and PyTriton
# (Triton with its Python back-end, serving torchvision's ResNet-18:
# scripts/peers/pytriton_resnet.py) run side by side on the same GPU;
# scripts/peers/v2probe.py shows one answer of each, field by field; then
# perf_analyzer and our suite (-target) measure each at the same points, one
# server after the other:
#   grpc, batch 1, concurrency 1, 2, 4, 8;
#   grpc with system shared memory, batch 32 and 256, concurrency 1, 2, 4.
# Triton with its C++ back-ends (PyTorch/libtorch, ONNX Runtime, TensorRT)
# is another peer, not measured here. Labels and files name the peer
# "pytriton" (results/nvidia-h200/peers, made before, says "triton").
#
# usage (repository root on the GPU machine): B=.gpuz2 OUT=$OUT scripts/peers/gpu-triton.sh
# B holds bins.tar.xz (inferbench and root.test built with -tags cuda),
# peers.tar.xz (perf_analyzer and lib/libb64.so.0d) and pyt.tar.xz
# (site/: nvidia-pytriton 0.7.0 and its Python 3.12 dependencies unpacked,
# less what the GPU image has: numpy, grpcio, protobuf);
# scripts/peers/README.md says how to make them.
set -u -o pipefail
B=${B:-.gpuz2}
OUT=${OUT:?set OUT to the output folder}
WINDOW=${WINDOW:-1s}
export INTERVAL_MS=${INTERVAL_MS:-1000}
P=/tmp/peers
mkdir -p "$P" "$OUT"
exec > >(tee -a "$OUT/gpu-triton.log") 2>&1
tar -C "$P" -xJf "$B/bins.tar.xz"
tar -C "$P" -xJf "$B/peers.tar.xz"
tar -C "$P" -xJf "$B/pyt.tar.xz"
# perf_analyzer wants libcudart.so.12: PyTriton's copy serves. PyTriton
# copies tritonserver into a workspace, where its RPATH no longer finds
# nvidia_pytriton.libs, and Triton's Python-backend stub ignores PYTHONPATH:
# the libraries go on LD_LIBRARY_PATH and the packages into the image's own
# site-packages (without replacing any it has).
ln -sf "$P"/site/nvidia_pytriton.libs/libcudart-*.so.12* "$P/lib/libcudart.so.12"
cp -rn "$P"/site/* "$(python3 -c 'import site; print(site.getsitepackages()[0])')"/
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$P/lib:$P/site/nvidia_pytriton.libs
export PA=$P/perf_analyzer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__, "cudnn", torch.backends.cudnn.version())'

waitfor() { # waitfor FILE PATTERN SECONDS
	for _ in $(seq $((2 * $3))); do
		grep -q "$2" "$1" && return 0
		sleep 0.5
	done
	return 1
}

"$P/inferbench" serve -backend cuda -precision fp16 -graphs -workers 2 -pipeline overlap \
	-max-batch 256 -batches 1,32,256 -max-queue 4096 \
	-http-addr 127.0.0.1:8000 -grpc-addr 127.0.0.1:8001 -metrics-addr 127.0.0.1:8002 >"$OUT/serve.log" 2>&1 &
ours=$!
waitfor "$OUT/serve.log" 'msg=serving' 60 && grep 'warm-up' "$OUT/serve.log" | cut -c1-300

python3 scripts/peers/pytriton_resnet.py --http-port 8100 --grpc-port 8101 --metrics-port 8102 \
	>"$OUT/pytriton.log" 2>&1 &
pytriton=$!
if waitfor "$OUT/pytriton.log" '^serving' 240; then
	grep 'pytriton_resnet:' "$OUT/pytriton.log"
	servers="ours:8001 pytriton:8101"
else
	echo "PyTriton did not start; the end of its log:"
	tail -40 "$OUT/pytriton.log"
	servers="ours:8001"
fi

for s in $servers; do
	name=${s%%:*} port=${s##*:}
	echo "== $name: one request, field by field"
	python3 scripts/peers/v2probe.py 127.0.0.1:$port
done
for s in $servers; do
	name=${s%%:*} port=${s##*:}
	echo "== $name: perf_analyzer"
	PROTOCOLS=grpc SHM=none BATCHES=1 CONC_1="1 2 4 8" scripts/peers/perf_analyzer.sh 127.0.0.1:$port - "$P/pa-$name"
	PROTOCOLS=grpc SHM=system BATCHES="32 256" CONC_32="1 2 4" CONC_256="1 2 4" \
		scripts/peers/perf_analyzer.sh 127.0.0.1:$port - "$P/pa-$name"
	echo "== $name: our suite"
	"$P/root.test" -test.run '^$' -test.bench 'Server$' -test.benchtime 1x -target grpc://127.0.0.1:$port -transports grpc \
		-batches 1 -loads closed -concurrency 1,2,4,8 -window "$WINDOW" -window-requests 10 -max-windows 6 >"$OUT/suite-$name.txt" 2>>"$P/suite.err"
	"$P/root.test" -test.run '^$' -test.bench 'Server$' -test.benchtime 1x -target grpc://127.0.0.1:$port -transports grpc-shm \
		-batches 32,256 -loads closed -concurrency 1,2,4 -window "$WINDOW" -window-requests 10 -max-windows 6 >>"$OUT/suite-$name.txt" 2>>"$P/suite.err"
	grep -c '^Benchmark' "$OUT/suite-$name.txt"
	grep -A3 -- '^--- FAIL' "$OUT/suite-$name.txt" | head -8
done
tail -5 "$P/suite.err"
tar -C "$P" -czf "$OUT/perf_analyzer.tgz" $(cd "$P" && ls -d pa-*)
kill -TERM $ours $pytriton
wait $ours
echo "our server exit: $?"
wait $pytriton
echo "pytriton exit: $?"
grep 'pytriton_resnet: instance' "$OUT/pytriton.log"
