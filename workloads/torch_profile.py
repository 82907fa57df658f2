"""Measured times from PyTorch's profiler, matched to an imported graph by module path.

Under :func:`annotate_modules` every module's forward is a ``record_function`` range
``distplan::<path>``, found in ``torch.profiler``'s key averages and its Chrome trace. A
module's own time per forward (its ranges' total over the runs, less its direct
children's) goes to the traced nodes whose innermost module it is, in proportion to
their forward FLOPs plus touched elements; an operator's time is the sum over its
nodes. Only the forward is read (``fwd_s``, seconds); what no module covers keeps the
roofline. CPU times are CPU time, CUDA times device time.

The rule in full: docs/guides/own-model.md, "Measure a torch module".
"""
from __future__ import annotations

import contextlib
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator

from distplan.core.errors import DistplanError
from distplan.workloads.profile import Profile

PREFIX = "distplan::"

#: torch dtype name -> distplan precision
DTYPE_PRECISION = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp32"}


@contextlib.contextmanager
def annotate_modules(module: Any) -> Iterator[None]:
    """While open, every submodule's forward of ``module`` (and its own) runs inside a
    ``torch.profiler.record_function("distplan::<path>")`` range."""
    import torch  # noqa: PLC0415

    handles, open_ranges = [], defaultdict(list)

    def pre(path: str):
        def hook(mod, args):
            rf = torch.profiler.record_function(PREFIX + path)
            rf.__enter__()
            open_ranges[path].append(rf)
        return hook

    def post(path: str):
        def hook(mod, args, out):
            if open_ranges[path]:
                open_ranges[path].pop().__exit__(None, None, None)
        return hook

    for path, sub in module.named_modules():
        handles.append(sub.register_forward_pre_hook(pre(path)))
        handles.append(sub.register_forward_hook(post(path)))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def module_times_s(run: Any, device: str = "cpu") -> tuple[dict[str, float], int]:
    """({module path: total seconds over the run}, number of runs) from a
    ``torch.profiler.profile`` object, its ``key_averages()``, a Chrome trace document
    (dict) or a Chrome trace file's path, profiled under :func:`annotate_modules`."""
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    cuda = device.startswith("cuda")
    if isinstance(run, (str, Path)):
        try:
            run = json.loads(Path(run).read_text())
        except (OSError, ValueError) as e:
            raise DistplanError(f"Chrome trace {str(run)!r} cannot be read: {e}") from None
    if isinstance(run, dict):
        want = "gpu_user_annotation" if cuda else "user_annotation"
        for ev in run.get("traceEvents", []):
            name = ev.get("name", "")
            if ev.get("ph") == "X" and ev.get("cat") == want and name.startswith(PREFIX):
                totals[name[len(PREFIX):]] += float(ev.get("dur", 0.0)) * 1e-6
                counts[name[len(PREFIX):]] += 1
    else:
        events = run if isinstance(run, list) else run.key_averages()   # key averages are an EventList
        for ev in events:
            if not str(ev.key).startswith(PREFIX):
                continue
            us = (getattr(ev, "device_time_total", None) if cuda else None)
            if us is None and cuda:
                us = getattr(ev, "cuda_time_total", 0.0)
            totals[ev.key[len(PREFIX):]] += float(ev.cpu_time_total if not cuda else us) * 1e-6
            counts[ev.key[len(PREFIX):]] += int(ev.count)
    if "" not in counts:
        raise DistplanError("the profiled run holds no distplan:: module ranges; profile the module inside "
                            "distplan.workloads.torch_profile.annotate_modules(module)")
    return dict(totals), counts[""]


def own_times_s(totals: dict[str, float], runs: int) -> dict[str, float]:
    """Each module's own seconds per forward: its total less its direct children's, / runs."""
    children: dict[str, float] = defaultdict(float)
    for path, t in totals.items():
        if path:
            children[path.rpartition(".")[0]] += t
    return {p: max(t - children.get(p, 0.0), 0.0) / max(runs, 1) for p, t in totals.items()}


def profile_from_torch(paths: dict[str, list[tuple[str, str, float]]], run: Any, kind: str, precision: str,
                       device: str = "cpu") -> Profile:
    """A profile for the graph whose operators' traced nodes are ``paths``
    (``import_module_with_paths``), from a profiled ``run`` (see :func:`module_times_s`):
    ``fwd_s`` of each op that some module's own time covers, on ``kind`` at ``precision``."""
    own = own_times_s(*module_times_s(run, device))
    by_path: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for op, nodes in paths.items():
        for _node, path, w in nodes:
            by_path[path].append((op, w))
    fwd: dict[str, float] = defaultdict(float)
    for path, t in own.items():
        share = by_path.get(path)
        if not share or t <= 0:
            continue
        total = math.fsum(w for _, w in share)
        for op, w in share:
            fwd[op] += t * (w / total if total > 0 else 1.0 / len(share))
    if not fwd:
        raise DistplanError("no module of the profiled run ran an operator of the graph; profile the same module "
                            "the graph was imported from")
    return Profile({op: {kind: {precision: (t, None)}} for op, t in fwd.items()}, source="torch profile")


def profile_module(module: Any, example_inputs: Any, kind: str = "cpu", device: str = "cpu", runs: int = 10,
                   warmup: int = 3, trace: str | Path | None = None) -> tuple[Any, Profile, dict[str, Any]]:
    """Import ``module`` (inference), run it ``warmup`` + ``runs`` times on ``device``
    under torch's profiler with its modules named, and return (Graph, Profile on
    ``kind``, notes). ``trace``: also write the run's Chrome trace there."""
    import torch  # noqa: PLC0415

    from distplan.workloads.torch_import import import_module_with_paths  # noqa: PLC0415

    module = module.eval()
    graph, paths = import_module_with_paths(module, example_inputs)
    dev = torch.device(device)
    module = module.to(dev)
    move = lambda x: x.to(dev) if isinstance(x, torch.Tensor) else x  # noqa: E731
    if isinstance(example_inputs, dict):
        args, kwargs = (), {k: move(v) for k, v in example_inputs.items()}
    else:
        xs = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
        args, kwargs = tuple(move(x) for x in xs), {}
    dtype = next((p.dtype for p in module.parameters() if p.is_floating_point()), torch.float32)
    prec = DTYPE_PRECISION.get(str(dtype).rsplit(".", 1)[-1], "fp32")
    acts = [torch.profiler.ProfilerActivity.CPU]
    if dev.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.no_grad():
        for _ in range(warmup):
            module(*args, **kwargs)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        with annotate_modules(module), torch.profiler.profile(activities=acts) as prof:
            for _ in range(runs):
                module(*args, **kwargs)
            if dev.type == "cuda":
                torch.cuda.synchronize()
    if trace is not None:
        prof.export_chrome_trace(str(trace))
    profile = profile_from_torch(paths, prof, kind, prec, device=str(dev))
    totals, n = module_times_s(prof, str(dev))
    notes = {"device": str(dev), "kind": kind, "precision": prec, "runs": n, "torch": torch.__version__,
             "forward_s": totals.get("", 0.0) / max(n, 1), "measured_ops": len(profile.times),
             "graph_ops": len(graph.ops)}
    return graph, profile, notes


__all__ = ["PREFIX", "annotate_modules", "module_times_s", "own_times_s", "profile_from_torch", "profile_module"]
