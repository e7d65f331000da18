#!/usr/bin/env bash
# h2spec.sh: HTTP/2 conformance (github.com/summerwind/h2spec) of both gRPC
# servers of `inferbench serve`.
#
# 1. Builds cmd/inferbench into a temporary directory.
# 2. For each of -grpc-server grpc-go and h2grpc: starts `inferbench serve`
#    (nop back-end, tiny model, gRPC only, on a free loopback port), runs
#    h2spec against it (prior knowledge, as gRPC clients connect) with a
#    JUnit report, and stops the server.
# 3. Prints each server's passed/failed/skipped counts and fails if a case
#    that grpc-go passes fails on h2grpc, in a second run of h2grpc too.
#    Cases both fail are listed in docs/H2SPEC.md with the reason.
#
# Environment (optional): H2SPEC (the h2spec binary; default: h2spec on the
# PATH, else $(go env GOPATH)/bin/h2spec), H2SPEC_OUT (where the reports go;
# default a temporary directory).
set -euo pipefail
cd "$(dirname "$0")/.."

h2spec=${H2SPEC:-$(command -v h2spec || echo "$(go env GOPATH)/bin/h2spec")}
if [ ! -x "$h2spec" ]; then
  echo "h2spec.sh: no h2spec (go install github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible)" >&2
  exit 2
fi
tmp=$(mktemp -d)
out=${H2SPEC_OUT:-$tmp}
mkdir -p "$out"
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/inferbench" ./cmd/inferbench

# free_port prints a loopback port nothing listens on now.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# cases prints the cases of a JUnit report whose outcome is $2 (passed,
# failed or skipped), one "package / case" a line.
cases() {
  python3 - "$1" "$2" <<'EOF'
import sys, xml.etree.ElementTree as ET
want = sys.argv[2]
for suite in ET.parse(sys.argv[1]).getroot().iter("testsuite"):
    for case in suite.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            got = "failed"
        elif case.find("skipped") is not None:
            got = "skipped"
        else:
            got = "passed"
        if got == want:
            print(f'{suite.get("package", suite.get("name", ""))} / {case.get("classname", case.get("name", ""))}')
EOF
}

# run_h2spec runs h2spec against `inferbench serve -grpc-server $1` and
# writes $out/$1.xml.
run_h2spec() {
  local impl=$1 port
  port=$(free_port)
  "$tmp/inferbench" serve -backend nop -model tiny -http-addr '' -metrics-addr '' \
    -grpc-addr "127.0.0.1:$port" -grpc-server "$impl" >"$out/$impl.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
      echo "h2spec.sh: inferbench serve -grpc-server $impl exited:" >&2
      cat "$out/$impl.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  # h2spec exits 1 when a case fails; the report says which.
  "$h2spec" -h 127.0.0.1 -p "$port" -j "$out/$impl.xml" >"$out/$impl.txt" 2>&1 || true
  kill "$server_pid"
  wait "$server_pid" 2>/dev/null || true
  server_pid=
  if [ ! -s "$out/$impl.xml" ]; then
    echo "h2spec.sh: h2spec wrote no report for $impl:" >&2
    cat "$out/$impl.txt" >&2
    exit 1
  fi
}

for impl in grpc-go h2grpc; do
  run_h2spec "$impl"
  printf '%-8s passed %3d  failed %3d  skipped %3d\n' "$impl" \
    "$(cases "$out/$impl.xml" passed | wc -l)" "$(cases "$out/$impl.xml" failed | wc -l)" \
    "$(cases "$out/$impl.xml" skipped | wc -l)"
done

cases "$out/grpc-go.xml" passed | sort >"$tmp/go-passed"
cases "$out/h2grpc.xml" failed | sort >"$tmp/h2-failed"
cases "$out/grpc-go.xml" failed | sort >"$tmp/go-failed"
regressions=$(comm -12 "$tmp/go-passed" "$tmp/h2-failed")
if [ -n "$regressions" ]; then
  # A case is a regression only if it fails twice: a few cases race the
  # server's closing of the connection against h2spec's reading.
  echo "again, h2grpc, for: $(echo "$regressions" | wc -l) cases"
  mv "$out/h2grpc.xml" "$out/h2grpc-1.xml"
  run_h2spec h2grpc
  cases "$out/h2grpc.xml" failed | sort >"$tmp/h2-failed-2"
  regressions=$(comm -12 "$tmp/go-passed" "$tmp/h2-failed" | comm -12 - "$tmp/h2-failed-2")
fi
both=$(comm -12 "$tmp/go-failed" "$tmp/h2-failed")
if [ -n "$both" ]; then
  echo
  echo "failed by both (see docs/H2SPEC.md):"
  echo "$both"
fi
if [ -n "$regressions" ]; then
  echo
  echo "FAIL: passed by grpc-go, failed by h2grpc:"
  echo "$regressions"
  exit 1
fi
echo "h2grpc passes every case grpc-go passes"
