#!/usr/bin/env bash
# Issue 24, device locks on several GPUs: two torchrun jobs of 2 ranks each under
# `gpumutex-run --num-devices 2` run side by side on disjoint pairs of a 4-GPU host, a third
# job waits for a free pair; each rank prints its CUDA_VISIBLE_DEVICES and the UUIDs torch sees.
# Then the same through the preload (LD_PRELOAD=libgpumutex_preload.so, GPUMUTEX_NUM_DEVICES=2:
# each torchrun's rank 0 takes a pair at its first cuInit and its sibling rank shares it).
#
#   bash tools/gpu/mutex_multigpu.sh              # on the GPU host (4 GPUs or more), from the
#                                                 # project root, binaries from the bundle B
#   bash tools/gpu/mutex_multigpu.sh --simulate   # here, without GPUs (see below)
#
# B= bundle directory with examples/gpumutex-run and examples/libgpumutex_preload.so (default
# .gpu-bundle; --simulate defaults to target/debug), OUT= logs (default /tmp/mutex-multigpu),
# HOLD= seconds each job holds its pair (default 8; 3 simulated), PYTHON= (python3),
# TORCHRUN= (torchrun). About 4 x HOLD + torch start-up per part, 60-90 s on the H200 host.
# NCCL runs with NVLink multicast off (NCCL_NVLS_ENABLE=0, see the device tool's KINDS.md).
#
# Prints one "RESULT <check> PASS|FAIL <detail>" line per check and exits non-zero if any fails.
# Checks, for each part (runner, preload):
#   ranks     every job's 2 ranks ran, each saw exactly the 2 GPUs of its job (torch UUIDs equal
#             the GPUs its CUDA_VISIBLE_DEVICES names per nvidia-smi), ranks on different GPUs
#   disjoint  the first two jobs ran at the same time on disjoint pairs (4 distinct GPUs)
#   waited    the third job started only when a pair was free, and never shared a GPU with a
#             job still running
#   nccl      (real torch only) an all_reduce over the 2 ranks of each job gave the right sum
#
# --simulate checks this script's orchestration and checks without GPUs: a fake driver tree
# (4 GPUs, GPUMUTEX_DEVICE_SOURCE=proc:...), a fake nvidia-smi, a fake libcuda built from the
# test fixtures, a fake `torch` Python module (device_count / get_device_properties(i).uuid from
# CUDA_VISIBLE_DEVICES; CUDA initialised through the fake libcuda's cuInit, so the preload
# intercepts it) and a fake torchrun (2 ranks with torchrun's environment). NCCL is skipped.
set -uo pipefail
simulate=0
[ "${1:-}" = --simulate ] && simulate=1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
OUT=${OUT:-/tmp/mutex-multigpu}
rm -rf "$OUT"; mkdir -p "$OUT"
PYTHON=${PYTHON:-python3}
TORCHRUN=${TORCHRUN:-torchrun}
fails=0
result() { echo "RESULT $1 $2 $3"; [ "$2" = PASS ] || fails=$((fails + 1)); }

if [ $simulate = 1 ]; then
  B=${B:-$root/target/debug}
  HOLD=${HOLD:-3}
  sim=$OUT/sim; mkdir -p "$sim/bin" "$sim/py/torch"
  for i in 0 1 2 3; do
    bus=$(printf '0000:%02x:00.0' $((0x18 + i * 16)))
    mkdir -p "$sim/gpus/$bus"
    printf 'Model: \t\t NVIDIA H200\nGPU UUID: \t GPU-%08x-1111-2222-3333-444444444444\nBus Location: \t %s\n' \
      "$i" "$bus" > "$sim/gpus/$bus/information"
  done
  export GPUMUTEX_DEVICE_SOURCE="proc:$sim/gpus"
  cat > "$sim/bin/nvidia-smi" <<'EOF'
#!/bin/sh
for i in 0 1 2 3; do printf '%d, GPU-%08x-1111-2222-3333-444444444444\n' "$i" "$i"; done
EOF
  cc -shared -fPIC -O1 -o "$sim/libcuda.so.1" "$root/gpukit-mutex/tests/fixtures/fake_libcuda.c" \
    "-Wl,--version-script=$root/gpukit-mutex/tests/fixtures/fake_libcuda.map" || exit 2
  export FAKE_LIBCUDA=$sim/libcuda.so.1 FAKE_CUDA_LOG=$sim/cuda.log
  cat > "$sim/py/torch/__init__.py" <<'EOF'
"""A stand-in for torch.cuda: CUDA is initialised through the fake libcuda's cuInit (which the
preload intercepts); the visible GPUs are read from CUDA_VISIBLE_DEVICES as CUDA reads it
(indices into the driver's list, or UUIDs), at that moment (the preload sets it in cuInit)."""
import ctypes, os, uuid as _uuid
_DRIVER = [f"GPU-{i:08x}-1111-2222-3333-444444444444" for i in range(4)]
_ready = False
def _env(name):
    v = ctypes.CDLL(None).getenv
    v.restype = ctypes.c_char_p
    r = v(name.encode())
    return None if r is None else r.decode()
def _visible():
    cvd = _env("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return list(_DRIVER)
    out = []
    for item in cvd.split(","):
        item = item.strip()
        if item.isdigit() and int(item) < len(_DRIVER):
            out.append(_DRIVER[int(item)])
        elif item.startswith("GPU-") and any(d.startswith(item) for d in _DRIVER):
            out.append(next(d for d in _DRIVER if d.startswith(item)))
        else:
            break
    return out
class _Props:
    def __init__(self, u):
        self.uuid = _uuid.UUID(u[4:])
        self.name = "NVIDIA H200 (simulated)"
class cuda:
    @staticmethod
    def _init():
        global _ready
        if not _ready:
            rc = ctypes.CDLL(os.environ["FAKE_LIBCUDA"]).cuInit(0)
            if rc != 0:
                raise RuntimeError(f"cuInit failed with {rc}")
            _ready = True
    @staticmethod
    def device_count():
        cuda._init(); return len(_visible())
    @staticmethod
    def get_device_properties(i):
        cuda._init(); return _Props(_visible()[i])
    @staticmethod
    def set_device(i):
        cuda._init()
EOF
  cat > "$sim/bin/torchrun" <<'EOF'
#!/usr/bin/env python3
"""A stand-in for torchrun --standalone --nproc_per_node N script: N ranks with torchrun's
environment, as children of this process."""
import os, subprocess, sys, uuid
args = sys.argv[1:]
n = 1
while args and args[0].startswith("--"):
    a = args.pop(0)
    if a == "--nproc_per_node":
        n = int(args.pop(0))
    elif a.startswith("--nproc_per_node="):
        n = int(a.split("=", 1)[1])
run_id = uuid.uuid4().hex
procs = []
for r in range(n):
    env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n),
               LOCAL_WORLD_SIZE=str(n), GROUP_RANK="0", TORCHELASTIC_RUN_ID=run_id,
               MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    procs.append(subprocess.Popen([sys.executable] + args, env=env))
sys.exit(max(p.wait() for p in procs))
EOF
  chmod +x "$sim/bin/nvidia-smi" "$sim/bin/torchrun"
  export PATH="$sim/bin:$PATH" PYTHONPATH="$sim/py${PYTHONPATH:+:$PYTHONPATH}"
  TORCHRUN=$sim/bin/torchrun
else
  B=${B:-.gpu-bundle}
  HOLD=${HOLD:-8}
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ "${ngpu:-0}" -lt 4 ]; then
    echo "RESULT setup FAIL this host has ${ngpu:-0} GPU(s); the check needs 4 (BLOCKED: run it on nvidia-h200-x4)"
    exit 1
  fi
fi
run=$(readlink -f "$B/examples/gpumutex-run")
so=$(readlink -f "$B/examples/libgpumutex_preload.so")
for f in "$run" "$so"; do
  [ -e "$f" ] || { echo "RESULT setup FAIL missing $f (build: cargo build --example gpumutex-run --example gpumutex_preload)"; exit 1; }
done
nvidia-smi --query-gpu=index,uuid --format=csv,noheader > "$OUT/gpus.csv" 2>/dev/null

# The rank program: one JSON line with what this rank sees, then an optional NCCL all_reduce,
# then it holds its GPU for HOLD seconds.
cat > "$OUT/rank.py" <<'EOF'
import ctypes, json, os, sys, time
import torch
t0 = time.time()
lr = int(os.environ.get("LOCAL_RANK", "0"))
torch.cuda.set_device(lr)
n = torch.cuda.device_count()
uuids = [str(torch.cuda.get_device_properties(i).uuid) for i in range(n)]
t1 = time.time()
getenv = ctypes.CDLL(None).getenv
getenv.restype = ctypes.c_char_p
cvd = (getenv(b"CUDA_VISIBLE_DEVICES") or b"").decode()
nccl = "skip"
try:
    import torch.distributed as dist
    dist.init_process_group("nccl")
    x = torch.ones(1, device=f"cuda:{lr}") * (dist.get_rank() + 1)
    dist.all_reduce(x)
    ws = dist.get_world_size()
    nccl = "ok" if int(x.item()) == ws * (ws + 1) // 2 else f"bad sum {x.item()}"
except (ImportError, AttributeError):
    nccl = "skip"
except Exception as e:
    nccl = f"fail {e!r}"
line = dict(job=os.environ["JOB"], rank=int(os.environ.get("RANK", "0")), local_rank=lr,
            cvd=cvd, count=n, uuids=uuids, mine=uuids[lr] if lr < n else None,
            start=t0, cuda_at=t1, nccl=nccl)
time.sleep(float(os.environ["HOLD"]))
line["end"] = time.time()
try:
    if nccl == "ok":
        dist.barrier(); dist.destroy_process_group()
except Exception:
    pass
print("RANKLINE " + json.dumps(line), flush=True)
EOF

# The checks over one part's rank lines.
cat > "$OUT/check.py" <<'EOF'
import json, sys
part, log, gpus = sys.argv[1], sys.argv[2], sys.argv[3]
norm = lambda u: u.lower().removeprefix("gpu-")
driver = []
for l in open(gpus):
    if l.strip():
        i, u = [x.strip() for x in l.split(",")[:2]]
        driver.append(norm(u))
ranks = [json.loads(l.split(" ", 1)[1]) for l in open(log) if l.startswith("RANKLINE ")]
jobs = {}
for r in ranks:
    jobs.setdefault(r["job"], []).append(r)
def named(cvd):
    out = []
    for item in cvd.split(","):
        item = item.strip()
        if item.isdigit():
            out.append(driver[int(item)])
        else:
            out.append(next(d for d in driver if d.startswith(norm(item))))
    return out
out = []
def res(name, ok, detail):
    out.append(f"RESULT {part}:{name} {'PASS' if ok else 'FAIL'} {detail}")
problems = []
spans = {}
for j in ("1", "2", "3"):
    rs = jobs.get(j, [])
    if len(rs) != 2:
        problems.append(f"job {j}: {len(rs)} rank line(s)")
        continue
    sets = [sorted(map(norm, r["uuids"])) for r in rs]
    if sets[0] != sets[1] or len(sets[0]) != 2:
        problems.append(f"job {j}: ranks saw {sets}")
    for r in rs:
        if sorted(map(norm, r["uuids"])) != sorted(named(r["cvd"])):
            problems.append(f"job {j} rank {r['rank']}: torch {r['uuids']} vs CUDA_VISIBLE_DEVICES={r['cvd']}")
    if len({norm(r["mine"]) for r in rs}) != 2:
        problems.append(f"job {j}: both ranks on one GPU")
    spans[j] = (min(r["cuda_at"] for r in rs), max(r["end"] for r in rs), set(sets[0]))
    print(f"{part}: job {j}: CUDA_VISIBLE_DEVICES={rs[0]['cvd']} GPUs {', '.join(sets[0])} "
          f"ran {min(r['cuda_at'] for r in rs):.2f}..{max(r['end'] for r in rs):.2f} nccl={[r['nccl'] for r in rs]}")
res("ranks", not problems, "; ".join(problems) or "6 ranks, each job on its own 2 GPUs as CUDA_VISIBLE_DEVICES names them")
if len(spans) == 3:
    order = sorted(spans, key=lambda j: spans[j][0])
    a, b, c = (spans[j] for j in order)
    both = a[0] < b[1] and b[0] < a[1]
    res("disjoint", both and not (a[2] & b[2]) and len(a[2] | b[2]) == 4,
        f"first two jobs {'overlapped' if both else 'did NOT overlap'} on {len(a[2] | b[2])} distinct GPUs")
    waited = c[0] >= min(a[1], b[1]) - 0.05
    clash = [j for j, s in ((order[0], a), (order[1], b)) if s[1] > c[0] and s[2] & c[2]]
    res("waited", waited and not clash,
        f"third job got CUDA {c[0] - min(a[1], b[1]):+.2f} s after the first pair was released; shared with {clash or 'nobody'}")
nccl = [r["nccl"] for r in ranks]
if any(n != "skip" for n in nccl):
    res("nccl", all(n == "ok" for n in nccl), f"{nccl}")
print("\n".join(out))
EOF

export HOLD NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
for part in runner preload; do
  locks=$OUT/$part.locks; mkdir -p "$locks"
  log=$OUT/$part.log; : > "$log"
  pids=()
  for j in 1 2 3; do
    if [ $part = runner ]; then
      JOB=$j timeout 300 "$run" --lock-dir "$locks" --visible-devices all --num-devices 2 -- \
        "$TORCHRUN" --standalone --nproc_per_node 2 "$OUT/rank.py" >> "$log" 2>> "$OUT/$part.err" &
    else
      JOB=$j LD_PRELOAD="$so" GPUMUTEX_LOCK_DIR="$locks" GPUMUTEX_VISIBLE_DEVICES=all \
        GPUMUTEX_NUM_DEVICES=2 timeout 300 "$TORCHRUN" --standalone --nproc_per_node 2 \
        "$OUT/rank.py" >> "$log" 2>> "$OUT/$part.err" &
    fi
    pids+=($!)
    # Let each job queue before the next one starts, so the third is the one that waits.
    sleep 1
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  [ $rc = 0 ] || result "$part:exit" FAIL "a job exited with $rc (see $OUT/$part.err)"
  if [ $simulate = 1 ]; then
    # The fake nvidia-smi is what the checks read: same GPUs as the fake driver tree.
    nvidia-smi > "$OUT/gpus.csv"
  fi
  "$PYTHON" "$OUT/check.py" "$part" "$log" "$OUT/gpus.csv" | tee "$OUT/$part.check"
  grep -q ' FAIL ' "$OUT/$part.check" && fails=$((fails + 1))
done
echo "logs in $OUT"
exit $(( fails > 0 ))
