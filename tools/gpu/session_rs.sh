#!/usr/bin/env bash
# Both of the eighth session's calls in one (device machines were scarce): session_r.sh (every
# GPU test, the ping-pong kernel's bench), then, if at most 400 s have passed, session_s.sh
# (issue 22's one-shot programs and process trees with the GPU's memory sampled).
#   tar xJf .gpu-bundle.tar.xz && tar xJf .gpu-base.tar.xz && B=.gpu-bundle OUT=$OUT bash tools/gpu/session_rs.sh
set -u
B=${B:-.gpu-bundle}; OUT=${OUT:-/tmp/session-rs}; here=$(dirname "$0")
T0=$SECONDS
B=$B OUT=$OUT/r bash "$here/session_r.sh"
if [ $((SECONDS - T0)) -le 400 ]; then
  B=$B OUT=$OUT/s bash "$here/session_s.sh"
else
  echo "session_s skipped: $((SECONDS - T0)) s passed"
fi
# only this one file comes back (the device tool returns a few files)
tar cf "$OUT/all.tar" -C "$OUT" r/logs.tar.xz s/logs.tar.xz 2> /dev/null; rm -rf "$OUT/r" "$OUT/s"
echo "all: $((SECONDS - T0)) s"
