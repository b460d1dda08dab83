#!/usr/bin/env bash
# On a GPU host: the gpumutex preload with real PyTorch (CUDA) processes.
#   tools/torch_mutex_check.sh PRELOAD_SO [GPUMUTEX_RUN]
# Checks, each printed as one line "RESULT <check> PASS|FAIL <detail>":
#   exclusive  two concurrent torch processes under the preload never hold device 0 together
#   ctrl_c     a torch process waiting inside cuInit for device 0 ends at once on SIGINT
#              (Ctrl-C), never gets CUDA, and the preload reports the interrupted wait
#   runner     (with GPUMUTEX_RUN) gpumutex-run holding device 0 runs a torch command under
#              the preload: its cuInit shares the runner's claim instead of queueing behind it
# Exits non-zero if any check fails. About 25-45 s (each torch start imports torch and creates a
# CUDA context).
set -uo pipefail
so=$(readlink -f "$1")
run=${2:+$(readlink -f "$2")}
dir=$(mktemp -d); mkdir -p "$dir/locks"
export GPUMUTEX_LOCK_DIR="$dir/locks" PYTHONUNBUFFERED=1
fails=0
result() { echo "RESULT $1 $2 $3"; [ "$2" = PASS ] || fails=$((fails + 1)); }
now_ms() { date +%s%3N; }

# exclusive ------------------------------------------------------------------------------------
prog='import time, torch
t0 = time.time(); x = torch.ones(1 << 20, device="cuda"); torch.cuda.synchronize(); t1 = time.time()
time.sleep(2.0); y = float((x * 2).sum()); t2 = time.time()
print(f"{t1:.6f} {t2:.6f} {y:.0f}")'
for i in 1 2; do
  LD_PRELOAD="$so" GPUMUTEX_VISIBLE_DEVICES=0 timeout 60 python3 -c "$prog" > "$dir/out$i" 2> "$dir/err$i" &
done
wait
detail=$(python3 - "$dir/out1" "$dir/out2" <<'PY'
import sys
try:
    (a0, a1, _), (b0, b1, _) = [tuple(map(float, open(f).read().split())) for f in sys.argv[1:]]
except Exception as e:
    print(f"FAIL could not read both runs ({e})"); sys.exit()
first, second = sorted([(a0, a1), (b0, b1)])
gap = second[0] - first[1]
print(("PASS" if gap >= 0 else "FAIL") + f" second got CUDA {gap*1e3:+.1f} ms after the first let go")
PY
)
result exclusive ${detail%% *} "${detail#* }"
[ "${detail%% *}" = PASS ] || { echo "--- stderr"; cat "$dir/err1" "$dir/err2"; }

# ctrl_c ---------------------------------------------------------------------------------------
rm -f "$dir/ready" "$dir/done"
LD_PRELOAD="$so" GPUMUTEX_VISIBLE_DEVICES=0 timeout 60 python3 -c "import os, time, torch
x = torch.ones(1, device='cuda'); torch.cuda.synchronize(); open('$dir/ready', 'w').close()
t = time.time()
while not os.path.exists('$dir/done') and time.time() - t < 30:
    time.sleep(0.05)" > "$dir/holder.out" 2> "$dir/holder.err" &
holder=$!
for _ in $(seq 300); do [ -e "$dir/ready" ] && break; sleep 0.1; done
LD_PRELOAD="$so" GPUMUTEX_VISIBLE_DEVICES=0 timeout 60 python3 -c "import torch
try:
    x = torch.ones(1, device='cuda'); torch.cuda.synchronize(); print('GOT_CUDA')
except KeyboardInterrupt:
    print('KEYBOARD_INTERRUPT'); raise
" > "$dir/waiter.out" 2> "$dir/waiter.err" &
waiter=$!
queued=0
for _ in $(seq 400); do
  if compgen -G "$dir/locks/gpukit-ticket.*" > /dev/null; then queued=1; break; fi
  sleep 0.05
done
sleep 0.3
t0=$(now_ms)
kill -INT "$waiter"
wait "$waiter"; code=$?
ms=$(( $(now_ms) - t0 ))
: > "$dir/done"
wait "$holder"; hcode=$?
if [ $queued = 1 ] && [ $ms -lt 3000 ] && ! grep -q GOT_CUDA "$dir/waiter.out" \
   && grep -q "interrupted by a signal" "$dir/waiter.err" && [ $hcode = 0 ]; then
  ki=no; grep -q "KEYBOARD_INTERRUPT\|KeyboardInterrupt" "$dir/waiter.out" "$dir/waiter.err" && ki=yes
  result ctrl_c PASS "waiter exited ${ms} ms after SIGINT (exit $code, KeyboardInterrupt seen: $ki), never got CUDA; holder unaffected"
else
  result ctrl_c FAIL "queued=$queued exit after ${ms} ms code=$code holder=$hcode"
  echo "--- waiter stdout"; cat "$dir/waiter.out"; echo "--- waiter stderr"; tail -20 "$dir/waiter.err"
fi

# runner ---------------------------------------------------------------------------------------
if [ -n "$run" ]; then
  t0=$(now_ms)
  out=$(GPUMUTEX_TIMEOUT=20 timeout 60 "$run" --visible-devices 0 -- env LD_PRELOAD="$so" python3 -c \
    "import torch; x = torch.ones(4, device='cuda'); print('sum', float(x.sum()))" 2> "$dir/runner.err")
  code=$?
  ms=$(( $(now_ms) - t0 ))
  if [ $code = 0 ] && [ "$out" = "sum 4.0" ]; then
    result runner PASS "torch under gpumutex-run + preload shared the runner's claim (${ms} ms)"
  else
    result runner FAIL "code=$code out=$out"; tail -20 "$dir/runner.err"
  fi
fi
rm -rf "$dir"
exit $(( fails > 0 ))
