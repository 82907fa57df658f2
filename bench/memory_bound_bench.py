"""The memory checker's bound against the simulated peak (issue 21) over three spaces of
random Megatron plans on 16 GPUs: every 1F1B plan of ``tests/test_memory_model.py``'s
property, every interleaved plan of a grid like ``tests/test_interleaved.py``'s, and a
seeded sample of deeper pipelines under the 1F1B phase rule alone. Per space: plans, the
worst bound / peak, the least (never below 1), and how many lie above 5 %.

    python bench/memory_bound_bench.py [--deep 500] [--json bench/results/memory_bound_bench.json]
"""
from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from distplan.api.configs import whatif  # noqa: E402
from distplan.core.errors import DistplanError  # noqa: E402
from distplan.costs.evaluate import plan_memory_bytes, static_memory_bytes, training_activation_bytes  # noqa: E402
from distplan.costs.memory import follows_1f1b_phases  # noqa: E402

MODELS = ("gpt3-125m", "gpt3-512x6x8", "llama-1024x8x16")


def one_f_one_b():
    """(label, what-if) for every plan of test_memory_model's random-plan space."""
    for w, tp, pp, dp, mb, m, rc, sp, zero, seq in itertools.product(
            MODELS, (1, 2, 4), (1, 2, 4), (1, 2), (1, 2), (4, 8), ("none", "selective", "full"),
            (False, True), (False, True), (256, 512)):
        if dp * tp * pp <= 16 and not (sp and tp == 1) and not (zero and dp == 1):
            yield (w, tp, pp, dp, mb, m, rc, sp, zero, seq), lambda w=w, tp=tp, pp=pp, dp=dp, mb=mb, m=m, rc=rc, \
                sp=sp, zero=zero, seq=seq: whatif(w, "a100x16", dp, tp, pp, mb, mb * dp * m, recompute=rc,
                                                  sequence_parallel=sp, zero=int(zero), seq_len=seq,
                                                  check_memory=False, breakdown=False)


def interleaved():
    """Interleaved plans: pp 2-4, vp 2-3, 1-3 groups of pp microbatches per replica."""
    for w, dp, pp, vp, tp, groups, rc, sp, zero in itertools.product(
            MODELS, (1, 2), (2, 3, 4), (2, 3), (1, 2), (1, 2, 3), ("none", "selective", "full"),
            (False, True), (False, True)):
        if dp * tp * pp <= 16 and pp * vp <= 8 and not (sp and tp == 1) and not (zero and dp == 1):
            yield (w, dp, pp, vp, tp, groups, rc, sp, zero), lambda w=w, dp=dp, pp=pp, vp=vp, tp=tp, g=groups, \
                rc=rc, sp=sp, zero=zero: whatif(w, "a100x16", dp=dp, tp=tp, pp=pp, vp=vp, global_batch=dp * pp * g,
                                                recompute=rc, sequence_parallel=sp, zero=int(zero),
                                                check_memory=False, breakdown=False)


def deep(n: int):
    """A seeded sample of deeper pipelines (pp 2-6, 1-12 microbatches, A100 and H100)."""
    space = [c for c in itertools.product(MODELS, ("a100x16", "h100x16"), (1, 2, 4), (2, 3, 4, 6), (1, 2),
                                          (1, 2, 3, 5, 12), ("none", "selective", "full"), (False, True), (128, 512))
             if c[2] * c[3] <= 16 and not (c[7] and c[2] == 1)]
    random.Random(1).shuffle(space)
    for w, t, tp, pp, mb, m, rc, sp, seq in space[:n]:
        yield (w, t, tp, pp, mb, m, rc, sp, seq), lambda w=w, t=t, tp=tp, pp=pp, mb=mb, m=m, rc=rc, sp=sp, \
            seq=seq: whatif(w, t, 1, tp, pp, mb, mb * m, recompute=rc, sequence_parallel=sp, seq_len=seq,
                            check_memory=False, breakdown=False)


def measure(cases, phase_rule_only: bool = False) -> dict:
    """Bound / simulated peak over the used devices of each case's plan."""
    worst, least, above, n, refused, worst_case = 0.0, float("inf"), 0, 0, 0, None
    t0 = time.perf_counter()
    for label, run in cases:
        try:
            r = run()
        except DistplanError:   # a grid point the what-if refuses (more chunks than layers)
            refused += 1
            continue
        if phase_rule_only and not follows_1f1b_phases(r.problem, r.plan):
            continue
        used = sorted({d for s in r.plan.stages for d in s.devices})
        bound = (static_memory_bytes(r.problem, r.plan) + training_activation_bytes(r.problem, r.plan, linear=False)
                 if phase_rule_only else plan_memory_bytes(r.problem, r.plan))[used]
        ratio = bound / r.sim.peak_memory_bytes[used]
        n += 1
        above += int(ratio.max() > 1.05)
        least = min(least, float(ratio.min()))
        if ratio.max() > worst:
            worst, worst_case = float(ratio.max()), [str(x) for x in label]
    return {"plans": n, "worst_bound_over_peak": round(worst, 5), "least_bound_over_peak": round(least, 5),
            "above_5_percent": above, "refused": refused, "worst_case": worst_case, "wall_s": round(time.perf_counter() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deep", type=int, default=500, help="deep pipelines sampled (default 500)")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    out = {}
    for name, cases, phase in (("1f1b", one_f_one_b(), False), ("interleaved", interleaved(), False),
                               ("deep_phase_rule", deep(a.deep), True)):
        out[name] = measure(cases, phase)
        r = out[name]
        print(f"{name}: {r['plans']} plans, bound / peak {r['least_bound_over_peak']:.4f} .. "
              f"{r['worst_bound_over_peak']:.4f} ({r['above_5_percent']} above 5 %, {r['refused']} refused), worst {r['worst_case']}, "
              f"{r['wall_s']} s", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
