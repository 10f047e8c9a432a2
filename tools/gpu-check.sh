#!/usr/bin/env bash
# The one prepared check for a lent GPU machine (issue 10 §5). Read-only towards the GPU: never changes MIG mode,
# clocks or power limits. Under 10 minutes. From the session machine:
#   bash tools/gpu-wheels.sh                          # once, here: stage the missing Python wheels in .whl/
#   device run: command="bash tools/gpu-check.sh", carry=[".whl"], timeout_s=560
# What it leaves in $OUT (8 files at most come back):
#   gpu-check.log      everything printed, nvidia-smi included
#   probe-h200.json    `gpu-watchdog probe --json`: every NVML call the sampler makes, supported or not (commit as
#                      docs/); `gpu-watchdog probe` just before prints the table, prerequisites first, to gpu-check.log
#   run-observe.log    60 s of `gpu-watchdog run --mode observe` (no Kubernetes)
#   timeslice.jsonl.gz a 120-tick trace of 2 PyTorch loads time-slicing the GPU (serve, greedy from tick 30)
#   loads.log          the loads' own per-second latency (the victim signal), time-sliced then under MPS
#   metrics.prom       one /metrics scrape taken while both time-sliced loads ran
#   mps.jsonl.gz       a 60-tick trace of 2 PyTorch loads as MPS clients of a daemon this script starts and stops
#                      (issue 21): what NVML's compute, MPS and graphics lists return is printed to gpu-check.log
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu-check.log") 2>&1
export PYTHONUNBUFFERED=1
started=$(date +%s)
step() { echo; echo "=== $* ($(( $(date +%s) - started )) s)"; }

step "python packages"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || echo "wheel install failed"
  export PYTHONPATH="/tmp/site:$PWD"
else
  echo "no .whl/: run tools/gpu-wheels.sh on the session machine and carry .whl"
  export PYTHONPATH="$PWD"
fi
GW=(python3 -m watchdog.cli)
"${GW[@]}" --version || { echo "gpu-watchdog does not import; stopping"; exit 1; }

step "nvidia-smi (read only)"
nvidia-smi || true
nvidia-smi --query-gpu=name,uuid,driver_version,mig.mode.current,pcie.link.gen.current,pcie.link.width.current,power.limit,clocks.max.sm --format=csv || true
nvidia-smi -L || true

step "probe"
timeout 120 "${GW[@]}" probe; echo "probe exit $?"
timeout 120 "${GW[@]}" probe --json > "$OUT/probe-h200.json"; echo "probe --json exit $?"

cat > /tmp/gpu-check.yaml <<YAML
node_name: gpu-check
kube: {access: none}
publishing: {port: 9435, host: 127.0.0.1}
sampling: {interval_seconds: 1.0}
YAML

step "60 s of run --mode observe"
timeout 60 "${GW[@]}" run --config /tmp/gpu-check.yaml --mode observe > "$OUT/run-observe.log" 2>&1
echo "run exit $? (124 = stopped by timeout, as intended)"; tail -n 30 "$OUT/run-observe.log"

step "time-slicing: record 120 ticks; serve from the start, greedy from ~30 s"
"${GW[@]}" record --config /tmp/gpu-check.yaml --out /tmp/timeslice.jsonl --ticks 120 --port 9436 \
  > "$OUT/record.log" 2>&1 &
record=$!
sleep 3
python3 tools/gpu_load.py serve --seconds 125 --memory-gib 4 > /tmp/serve.log 2>&1 &
serve=$!
sleep 30
python3 tools/gpu_load.py greedy --seconds 90 --memory-gib 8 > /tmp/greedy.log 2>&1 &
greedy=$!
sleep 20
curl -s http://127.0.0.1:9436/metrics > "$OUT/metrics.prom" 2>/dev/null \
  || python3 -c "import urllib.request,sys; sys.stdout.buffer.write(urllib.request.urlopen('http://127.0.0.1:9436/metrics').read())" > "$OUT/metrics.prom" \
  || echo "scrape failed"
wait "$greedy"; echo "greedy exit $?"
wait "$serve"; echo "serve exit $?"
timeout 60 tail --pid="$record" -f /dev/null; wait "$record"; echo "record exit $?"
tail -n 20 "$OUT/record.log"
gzip -c /tmp/timeslice.jsonl > "$OUT/timeslice.jsonl.gz" && ls -l "$OUT"
python3 - <<'PY'
import gzip, json, os
path = os.path.join(os.environ.get("OUT", "/tmp/gpu-check-out"), "timeslice.jsonl.gz")
try:
    lines = gzip.open(path, "rt").read().splitlines()
except OSError as exc:
    raise SystemExit(f"no trace: {exc}")
print(f"trace: {len(lines)} lines")
for line in lines[1:][::20]:
    tick = json.loads(line)
    procs = [(p.get("pid"), p.get("sm_util"), p.get("used_memory_bytes")) for g in tick["sample"]["gpus"] for p in g.get("processes", [])]
    print(tick["sample"]["tick"], procs)
PY
{ echo "--- time-sliced serve"; cat /tmp/serve.log; echo "--- time-sliced greedy"; cat /tmp/greedy.log; } > "$OUT/loads.log"

step "MPS: a daemon of this script's own, two PyTorch clients, NVML's three process lists, a 60-tick trace"
# Never the node's compute mode, MIG mode, clocks or power limits: a private pipe and log directory, and the daemon
# is stopped at the end (echo quit). MPS works in the default compute mode.
export CUDA_MPS_PIPE_DIRECTORY=/tmp/gpu-check-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/gpu-check-mps/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
if command -v nvidia-cuda-mps-control >/dev/null && nvidia-cuda-mps-control -d; then
  "${GW[@]}" record --config /tmp/gpu-check.yaml --out /tmp/mps.jsonl --ticks 60 --port 9437 > /tmp/mps-record.log 2>&1 &
  record=$!
  sleep 3
  python3 tools/gpu_load.py serve --seconds 55 --memory-gib 2 > /tmp/mps-serve.log 2>&1 &
  serve=$!
  python3 tools/gpu_load.py greedy --seconds 50 --memory-gib 3 > /tmp/mps-greedy.log 2>&1 &
  greedy=$!
  sleep 20
  python3 - <<'PY'
import pynvml as n
n.nvmlInit()
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetMPSComputeRunningProcesses",
                 "nvmlDeviceGetGraphicsRunningProcesses"):
        try:
            rows = [(p.pid, p.usedGpuMemory) for p in getattr(n, name)(h)]
        except n.NVMLError as exc:
            rows = f"error {exc}"
        comms = []
        for pid, _ in rows if isinstance(rows, list) else []:
            try:
                comms.append(open(f"/proc/{pid}/comm").read().strip())
            except OSError:
                comms.append("?")
        print(f"gpu {i} {name}: {rows} comm={comms}")
    try:
        util = [(s.pid, s.smUtil, s.memUtil) for s in n.nvmlDeviceGetProcessUtilization(h, 0)]
    except n.NVMLError as exc:
        util = f"error {exc}"
    print(f"gpu {i} nvmlDeviceGetProcessUtilization: {util}")
n.nvmlShutdown()
PY
  wait "$greedy"; wait "$serve"
  timeout 30 tail --pid="$record" -f /dev/null; wait "$record"; echo "mps record exit $?"
  echo quit | nvidia-cuda-mps-control; echo "mps daemon stopped"
  { echo "--- MPS serve"; cat /tmp/mps-serve.log; echo "--- MPS greedy"; cat /tmp/mps-greedy.log; } >> "$OUT/loads.log"
  tail -n 5 /tmp/mps-record.log
  gzip -c /tmp/mps.jsonl > "$OUT/mps.jsonl.gz" || echo "no MPS trace"
else
  echo "nvidia-cuda-mps-control missing or failed to start: no MPS check"
fi
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY

step "done"
