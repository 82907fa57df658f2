"""``python -m distplan.profile MODEL --device cpu``: time each operator of a torch module
on this machine and write a ``distplan-profile`` (and the graph it is keyed to).

MODEL: ``bert-tiny`` (a 2-layer BERT from a ``transformers`` config, random weights),
``resnet-tiny`` (a small ResNet-like CNN), or ``package.module:function`` returning
``(module, example_inputs)``. Forward times only (workloads/torch_profile.py)."""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

from distplan.cli.args import Parser, check_output_file
from distplan.core.errors import DistplanError


def tiny_resnet(batch: int = 2) -> tuple[Any, Any]:
    """A ResNet-like CNN: a stem, two residual blocks (conv-bn-relu-conv-bn + skip), a head."""
    import torch  # noqa: PLC0415
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu(self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))) + x)

    class TinyResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
            self.layer1 = nn.Sequential(Block(16), Block(16))
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            return self.fc(torch.flatten(self.pool(self.layer1(self.stem(x))), 1))

    torch.manual_seed(0)
    return TinyResNet().eval(), (torch.randn(batch, 3, 32, 32),)


def tiny_bert(batch: int = 1, seq: int = 32) -> tuple[Any, Any]:
    """A 2-layer BERT (hidden 64, 2 heads) from a transformers config, random weights."""
    import torch  # noqa: PLC0415
    from transformers import BertConfig, BertModel  # noqa: PLC0415

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=128, max_position_embeddings=64)
    return BertModel(cfg).eval(), {"input_ids": torch.randint(0, 1000, (batch, seq))}


MODELS = {"bert-tiny": tiny_bert, "resnet-tiny": tiny_resnet}


def build(name: str) -> tuple[Any, Any]:
    if name in MODELS:
        return MODELS[name]()
    mod, sep, fn = name.partition(":")
    if not sep:
        raise DistplanError(f"model {name!r} unknown; use one of {', '.join(MODELS)} or package.module:function")
    try:
        out = getattr(importlib.import_module(mod), fn)()
    except (ImportError, AttributeError) as e:
        raise DistplanError(f"model {name!r}: {e}") from None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise DistplanError(f"model {name!r}: the function must return (module, example_inputs)")
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = Parser(prog="python -m distplan.profile", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("model", help=f"{', '.join(MODELS)} or package.module:function -> (module, inputs)")
    ap.add_argument("--device", default="cpu", help="torch device to time on (cpu, cuda, cuda:1)")
    ap.add_argument("--kind", default=None, help="device kind name the times are for, as the topology names it "
                                                 "(default: cpu, or the CUDA device's short name, e.g. h200)")
    ap.add_argument("--runs", type=int, default=10, help="timed forward passes")
    ap.add_argument("--warmup", type=int, default=3, help="untimed forward passes first")
    ap.add_argument("--out", default="profile.json", help="the profile to write")
    ap.add_argument("--graph", default="graph.json", help="the imported graph the profile is keyed to")
    ap.add_argument("--trace", default=None, help="also write the profiled run's Chrome trace")
    return ap.parse_args(argv)


def _kind(device: str) -> str:
    if not device.startswith("cuda"):
        return "cpu"
    import torch  # noqa: PLC0415

    name = torch.cuda.get_device_name(torch.device(device)).lower()
    for k in ("h200", "h100", "a100", "v100", "t4", "l4", "a10"):
        if k in name:
            return k
    return name.replace(" ", "-")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.runs < 1 or args.warmup < 0:
            raise DistplanError("--runs must be >= 1 and --warmup >= 0")
        for flag, path in (("--out", args.out), ("--graph", args.graph), ("--trace", args.trace)):
            check_output_file(path, flag)
        try:
            import torch  # noqa: F401, PLC0415
        except ImportError:
            raise DistplanError("python -m distplan.profile needs PyTorch: pip install -e '.[torch]'") from None
        from distplan.workloads.io import save_graph  # noqa: PLC0415
        from distplan.workloads.profile import save_profile  # noqa: PLC0415
        from distplan.workloads.torch_profile import profile_module  # noqa: PLC0415

        module, inputs = build(args.model)
        kind = args.kind or _kind(args.device)
        graph, profile, notes = profile_module(module, inputs, kind=kind, device=args.device, runs=args.runs,
                                               warmup=args.warmup, trace=args.trace)
        save_graph(graph, args.graph)
        save_profile(profile, args.out, meta={"model": args.model, **notes})
        print(f"{args.model}: {notes['measured_ops']} of {notes['graph_ops']} ops timed on {notes['device']} "
              f"(kind {kind}, {notes['precision']}), forward {notes['forward_s'] * 1e3:.3f} ms over "
              f"{notes['runs']} runs; wrote {args.out} and {args.graph}")
        return 0
    except DistplanError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
