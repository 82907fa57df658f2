"""Calibrate the roofline cost model against real kernels on an NVIDIA GPU (optional).

Times transformer-shaped matmuls at every precision the GPU runs (fp32, tf32, bf16,
fp16, fp8 via torch._scaled_mm, int8 via torch._int_mm), memory-bound operators
(softmax, layernorm, gelu) and an empty kernel launch, then compares each with
``costs.compute.roofline_time_s`` for an H100/H200-class device kind built from the
public peak figures in docs/HARDWARE.md. Prints a table and writes JSON with the measured
seconds, the prediction and their ratio, and the achieved fraction of peak per
precision (the value the presets' ``efficiency`` approximates).

Needs torch with CUDA; nothing in distplan depends on this script or its output.

    python bench/calibrate_gpu.py --out calib.json [--mem-bw-GBps 4800]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from distplan.costs.compute import roofline_time_s  # noqa: E402
from distplan.topologies.topology import DeviceKind  # noqa: E402

# H100 SXM dense peaks (docs/HARDWARE.md), FLOP/s; H200 has the same compute, more memory bw.
H100_PEAK = {"fp32": 67e12, "tf32": 495e12, "bf16": 989e12, "fp16": 989e12, "fp8": 1979e12, "int8": 1979e12}
SHAPES = [  # (M = batch*seq, K, N): BERT-base/large, GPT-2 projections and FFNs; and a large square
    (128, 768, 2304), (128, 768, 3072), (128, 3072, 768), (1024, 768, 2304), (1024, 768, 3072),
    (1024, 3072, 768), (8192, 1024, 4096), (8192, 4096, 1024), (8192, 8192, 8192),
]


def _time_s(fn, repeat: int = 20, warmup: int = 3) -> float:
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    return statistics.median(times)


def _matmul_fn(prec: str, m: int, k: int, n: int):
    import torch

    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
    if prec in ("fp32", "tf32"):
        a, b = torch.randn(m, k, device=dev), torch.randn(k, n, device=dev)
        return lambda: a @ b
    if prec in ("bf16", "fp16"):
        dt = torch.bfloat16 if prec == "bf16" else torch.float16
        a, b = torch.randn(m, k, device=dev, dtype=dt), torch.randn(k, n, device=dev, dtype=dt)
        return lambda: a @ b
    if prec == "fp8":
        a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()  # column-major as _scaled_mm wants
        one = torch.tensor(1.0, device=dev)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    if prec == "int8":
        a = torch.randint(-8, 8, (m, k), device=dev, dtype=torch.int8)
        b = torch.randint(-8, 8, (k, n), device=dev, dtype=torch.int8)
        return lambda: torch._int_mm(a, b)
    raise ValueError(prec)


BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
OUT_BYTES = {"fp8": 2, "int8": 4}  # fp8 products written as bf16, int8 products accumulate to int32


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="calib.json")
    ap.add_argument("--mem-bw-GBps", type=float, default=4800.0, help="device memory bandwidth (H200: 4800)")
    ap.add_argument("--efficiency", type=float, default=0.7, help="efficiency factor used for the prediction")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("calibrate_gpu: torch is not installed; nothing to calibrate", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("calibrate_gpu: no CUDA device; nothing to calibrate", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name()
    kind = DeviceKind("gpu", dict(H100_PEAK), 141e9, args.mem_bw_GBps * 1e9, args.efficiency, 0.0)
    # launch overhead: an empty-ish kernel, timed by wall clock over many launches
    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(2000):
        x.add_(1)
    torch.cuda.synchronize()
    launch_s = (time.perf_counter() - t0) / 2000
    rows = []
    for prec in H100_PEAK:
        for m, k, n in SHAPES:
            try:
                t = _time_s(_matmul_fn(prec, m, k, n))
            except Exception as e:  # an unsupported precision/shape on this GPU or torch build
                rows.append({"op": "matmul", "prec": prec, "shape": [m, k, n], "error": repr(e)[:120]})
                continue
            flops = 2.0 * m * k * n
            nbytes = (m * k + k * n) * BYTES[prec] + m * n * OUT_BYTES.get(prec, BYTES[prec])
            pred = roofline_time_s(flops, nbytes, kind, prec) + launch_s
            rows.append({"op": "matmul", "prec": prec, "shape": [m, k, n], "measured_s": t, "predicted_s": pred,
                         "ratio": t / pred, "achieved_flops_per_s": flops / t,
                         "fraction_of_peak": flops / t / H100_PEAK[prec]})
    for label, shape, fn_name in (("softmax", (12, 1024, 1024), "softmax"), ("layernorm", (8192, 1024), "layernorm"),
                                  ("gelu", (8192, 4096), "gelu")):
        for prec, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
            a = torch.randn(*shape, device="cuda", dtype=dt)
            fn = {"softmax": lambda: torch.softmax(a, -1),
                  "layernorm": lambda: torch.nn.functional.layer_norm(a, a.shape[-1:]),
                  "gelu": lambda: torch.nn.functional.gelu(a)}[fn_name]
            t = _time_s(fn)
            elems = a.numel()
            flops = 5.0 * elems
            pred = roofline_time_s(flops, 2 * elems * BYTES[prec], kind, prec) + launch_s
            rows.append({"op": label, "prec": prec, "shape": list(shape), "measured_s": t, "predicted_s": pred,
                         "ratio": t / pred, "achieved_bytes_per_s": 2 * elems * BYTES[prec] / t})
    best = {}
    for r in rows:
        if r.get("op") == "matmul" and "fraction_of_peak" in r:
            best[r["prec"]] = max(best.get(r["prec"], 0.0), r["fraction_of_peak"])
    ratios = [r["ratio"] for r in rows if "ratio" in r]
    doc = {"device": name, "torch": torch.__version__, "launch_overhead_s": launch_s,
           "efficiency_assumed": args.efficiency, "best_fraction_of_peak": best,
           "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
           "rows": rows}
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print(f"{name}, torch {torch.__version__}, launch overhead {launch_s * 1e6:.1f} us")
    print(f"{'op':<10}{'prec':<6}{'shape':<22}{'measured us':>12}{'predicted us':>13}{'ratio':>7}{'%peak':>7}")
    for r in rows:
        if "error" in r:
            print(f"{r['op']:<10}{r['prec']:<6}{str(r['shape']):<22} error {r['error']}")
            continue
        frac = f"{100 * r['fraction_of_peak']:.0f}" if "fraction_of_peak" in r else ""
        print(f"{r['op']:<10}{r['prec']:<6}{str(r['shape']):<22}{r['measured_s'] * 1e6:>12.1f}"
              f"{r['predicted_s'] * 1e6:>13.1f}{r['ratio']:>7.2f}{frac:>7}")
    print("best fraction of peak per precision:", {k: round(v, 3) for k, v in best.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
