"""fp8 training as Transformer Engine runs it (``te.Linear`` under ``fp8_autocast``):
which ops compute in fp8 and what the per-tensor scaling costs around each fp8 GEMM.

Ops: the linear layers (kind "matmul": QKV, attention out-projection, MLP up/gate/down)
run their forward GEMM and both backward GEMMs (dgrad, wgrad) in fp8; the attention core
(flash attention's batched products and softmax: TE's ``fp8_dpa`` is off by default), norms,
embedding, LM head and the optimizer stay 16-bit, as do the tensors between ops (a GEMM
writes bf16) and the gradients. An MoE router stays wide (Megatron keeps it in fp32).

Cost, per fp8 GEMM, as memory-bound kernels at HBM bandwidth (``cast_s``): each input
the GEMM quantizes is read in bf16 and written in fp8 twice (the tensor and its transpose:
Hopper's fp8 GEMMs take only the TN layout, so wgrad needs the transposed copies; TE fuses
cast and transpose). The published runs use current scaling (TE's ``Float8CurrentScaling``,
NeMo's "FP8-CS": one fp32 scale a tensor from its own amax), which reads the tensor once
more for the amax before the cast: ``CAST_BYTES_PER_ELEM`` = 2 (amax) + 2 (read) + 1 + 1
(fp8 and its transpose) = 6, two kernels (``CAST_KERNELS``). Delayed scaling would fuse the
amax into the cast (4 B an element, one kernel) and reduce its amax history once a step
(a few floats; not charged). Forward: the activation input. Backward: the output
gradient. The weight: once per optimizer step (TE caches the fp8 weight and its transpose
across microbatches, Megatron's ``is_first_microbatch``), charged with the optimizer step
(``weight_cast_s``). Not modelled: the amax all-reduce over a tensor-parallel group for
sequence-parallel inputs (one float, latency only).
"""
from __future__ import annotations

#: op kinds the recipe runs in fp8 (the linear layers); every other kind stays 16-bit
FP8_TRAINING_KINDS = frozenset({"matmul"})
#: linear layers that stay wide all the same: an MoE router (Megatron keeps it in fp32)
FP8_WIDE_NAMES = frozenset({"router"})
#: bytes moved per element a GEMM quantizes under current scaling (module docstring)
CAST_BYTES_PER_ELEM = 6.0
#: kernels per quantized tensor: the amax reduction and the fused cast-transpose
CAST_KERNELS = 2


def gemm_input_elems(op) -> float:
    """Elements of a linear op's activation input: what it touches, less its weight and
    output (``Operator.touched_elems`` counts inputs, weights and outputs once)."""
    return max(0.0, float(op.touched_elems) - float(op.param_elems) - float(op.out_elems))


def cast_s(elems: float, mem_bw_bytes_per_s: float, launch_overhead_s: float) -> float:
    """Seconds to quantize one tensor of ``elems`` bf16 elements to fp8 (with its transpose)."""
    if elems <= 0:
        return 0.0
    return elems * CAST_BYTES_PER_ELEM / mem_bw_bytes_per_s + CAST_KERNELS * launch_overhead_s


def fp8_cast_fwd_s(op, mem_bw_bytes_per_s: float, launch_overhead_s: float) -> float:
    """The forward's scaling cost of an fp8 linear op: its activation input quantized."""
    return cast_s(gemm_input_elems(op), mem_bw_bytes_per_s, launch_overhead_s)


def fp8_cast_bwd_s(op, mem_bw_bytes_per_s: float, launch_overhead_s: float) -> float:
    """The backward's: the output gradient quantized (dgrad and wgrad share it)."""
    return cast_s(float(op.out_elems), mem_bw_bytes_per_s, launch_overhead_s)


def weight_cast_s(param_elems: float, tensors: int, mem_bw_bytes_per_s: float, launch_overhead_s: float) -> float:
    """Seconds a device spends a step casting ``param_elems`` fp8 weights (over ``tensors``
    weight tensors) to fp8 and their transposes."""
    if param_elems <= 0:
        return 0.0
    return param_elems * CAST_BYTES_PER_ELEM / mem_bw_bytes_per_s + tensors * CAST_KERNELS * launch_overhead_s


def is_fp8_linear(op) -> bool:
    """Does the recipe (may) run ``op`` in fp8 and charge its scaling?"""
    return op.kind in FP8_TRAINING_KINDS and op.name.rsplit(".", 1)[-1] not in FP8_WIDE_NAMES
