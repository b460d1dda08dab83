#!/usr/bin/env bash
# On a GPU host: two concurrent PyTorch processes under the gpumutex preload must not hold
# device 0 at the same time. Each records when CUDA became usable and when it let go.
#   tools/torch_mutex_check.sh path/to/libgpumutex_preload.so
set -euo pipefail
so=$(readlink -f "$1")
dir=$(mktemp -d); mkdir -p "$dir/locks"
prog='import time, torch
t0 = time.time(); x = torch.ones(1 << 20, device="cuda"); torch.cuda.synchronize(); t1 = time.time()
time.sleep(2.0); y = float((x * 2).sum()); t2 = time.time()
print(f"{t1:.6f} {t2:.6f} {y:.0f}")'
for i in 1 2; do
  LD_PRELOAD="$so" GPUMUTEX_VISIBLE_DEVICES=0 GPUMUTEX_LOCK_DIR="$dir/locks" \
    python3 -c "$prog" > "$dir/out$i" 2> "$dir/err$i" &
done
wait
cat "$dir/out1" "$dir/out2"
python3 - "$dir/out1" "$dir/out2" <<'PY'
import sys
(a0, a1, _), (b0, b1, _) = [tuple(map(float, open(f).read().split())) for f in sys.argv[1:]]
first, second = sorted([(a0, a1), (b0, b1)])
gap = second[0] - first[1]
print(f"torch under gpumutex_preload: first held {first[0]:.3f}..{first[1]:.3f}, second got CUDA {gap*1e3:+.1f} ms after the first finished")
sys.exit(0 if gap >= 0 else 1)
PY
