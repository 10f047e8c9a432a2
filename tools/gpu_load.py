"""A GPU load with a chosen duty cycle, for the time-slicing evidence of tools/gpu-check.sh (device machine only).

``serve``: N small matmuls, then a sleep, in a loop — a latency-bound service at a fixed request rate; it prints
its per-batch latency, the victim signal a real service would export. ``greedy``: large matmuls back to back,
never sleeping — the neighbour that takes the GPU. Needs PyTorch and a CUDA GPU; never touches MIG mode, clocks
or power limits.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=("serve", "greedy"))
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--size", type=int, default=0, help="matrix size (default: 1024 serve, 8192 greedy)")
    parser.add_argument("--batch", type=int, default=8, help="serve: matmuls per request")
    parser.add_argument("--sleep", type=float, default=0.02, help="serve: idle seconds between requests")
    parser.add_argument("--memory-gib", type=float, default=2.0, help="device memory to hold while running")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    size = args.size or (1024 if args.kind == "serve" else 8192)
    hold = torch.empty(int(args.memory_gib * 2**30), dtype=torch.uint8, device="cuda")  # a visible memory footprint
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    deadline = time.monotonic() + args.seconds
    report_at = time.monotonic() + 1.0
    latencies: list[float] = []
    while time.monotonic() < deadline:
        started = time.perf_counter()
        for _ in range(args.batch if args.kind == "serve" else 4):
            a @ b
        torch.cuda.synchronize()
        latencies.append(time.perf_counter() - started)
        if args.kind == "serve":
            time.sleep(args.sleep)
        if time.monotonic() >= report_at:
            latencies.sort()
            p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
            print(json.dumps({"t": round(time.time(), 3), "kind": args.kind, "requests": len(latencies),
                              "p50_s": latencies[len(latencies) // 2], "p99_s": p99}), flush=True)
            latencies, report_at = [], report_at + 1.0
    del hold
    return 0


if __name__ == "__main__":
    sys.exit(main())
