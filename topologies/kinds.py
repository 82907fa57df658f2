"""Device kinds and link figures the presets are built from, each with its source.

Every number comes from docs/HARDWARE.md (vendor data sheets and papers) unless
it is marked ASSUMPTION, in which case the reason is given next to it. Peaks are dense
(no sparsity). int8 rates are TOPS, counted here as FLOP/s (one MAC = 2 ops either way).

GPU efficiency (achievable fraction of dense peak on large matmuls): ASSUMPTION 0.7 for
the SXM data-centre parts, typical of cuBLAS GEMMs at large sizes (70-80 % of tensor-core
peak) discounted a little for whole transformer layers; 0.6 for the T4, whose 70 W cap
keeps sustained clocks well below boost. The launch overhead per operator task is
ASSUMPTION 5 us on GPUs (a few kernel launches at ~3-5 us each when not overlapped) and
1 us on a chiplet (a task dispatch on a fixed-function accelerator). A calibration run on
an H200 (bench/results/calibration-h200.txt) supports the efficiency: large matmuls reached
72-81 % of dense peak at fp32/tf32/bf16/fp16/fp8 (int8 through torch._int_mm only 6 %, a
library gap, not the hardware); its PyTorch-eager per-op overhead was ~17 us, so 5 us
assumes a compiled or graph-captured runtime.

The chiplet (``CHIPLET``) follows Simba (NVIDIA research, 2019; 6x6 chiplets, 4 TOPS int8
per chiplet, ~100 GB/s network-on-package per chiplet and ~20 ns per hop, the last two
*unconfirmed* third-party figures). Simba's buffers are well under 1 MB per chiplet, far
too small to hold BERT weights on the package, so the SRAM is an ASSUMPTION: 64 MiB of
stacked SRAM per chiplet, the size of one AMD 3D V-Cache die (64 MB of SRAM stacked on a
Zen 3 CCD, ~2 TB/s to the die below), which we also take as its bandwidth. With it a
BERT-base (110 M params, 220 MB at fp16) fits on 16 chiplets (1 GiB), its word embedding
(23.4 M params, 47 MB at fp16) fits on one chiplet, and a GPT-2 small word embedding
(38.6 M params) fits on one chiplet at int8 (38.6 MB) but not at fp16 (77 MB), so
precision choice matters. Precisions: int8 at Simba's 4 TOPS; fp8 ASSUMED at the same
8-bit rate; fp16/bf16 ASSUMED at half the 8-bit rate (2 TFLOP/s); fp32 ASSUMED at 1/8 of
fp16 (0.25 TFLOP/s), a low-rate fallback path. Efficiency ASSUMED 0.75 (Simba reports high
PE utilisation on its own dataflow; we discount it for operators it is not tuned for).
GPU memory is the marketed capacity in decimal GB (80 GB = 80e9 bytes), a little below
the physical GiB, which leaves room for the runtime.
"""
from __future__ import annotations

from distplan.topologies.topology import DeviceKind

TERA = 1e12
GIGA = 1e9
MIB = 2**20

GPU_EFFICIENCY = 0.7
T4_EFFICIENCY = 0.6
GPU_LAUNCH_OVERHEAD_S = 5e-6
CHIPLET_LAUNCH_OVERHEAD_S = 1e-6

CHIPLET = DeviceKind(
    name="chiplet",
    peak_flops_per_s={"fp32": 0.25 * TERA, "bf16": 2 * TERA, "fp16": 2 * TERA,
                      "fp8": 4 * TERA, "int8": 4 * TERA},
    mem_capacity_bytes=float(64 * MIB),
    mem_bw_bytes_per_s=2000 * GIGA,
    efficiency=0.75,
    launch_overhead_s=CHIPLET_LAUNCH_OVERHEAD_S,
    source="Simba (2019) chiplet: 4 TOPS int8; ASSUMED fp8 = int8 rate, fp16/bf16 = 1/2 of it, "
           "fp32 = 1/8 of fp16; ASSUMED 64 MiB stacked SRAM at 2 TB/s (AMD 3D V-Cache die)",
)

V100 = DeviceKind(
    name="v100",
    peak_flops_per_s={"fp32": 15.7 * TERA, "fp16": 125 * TERA},
    mem_capacity_bytes=32 * GIGA,
    mem_bw_bytes_per_s=900 * GIGA,
    efficiency=GPU_EFFICIENCY,
    launch_overhead_s=GPU_LAUNCH_OVERHEAD_S,
    source="NVIDIA V100 SXM2 32 GB data sheet; fp16/fp32 only (QSync); efficiency ASSUMED",
)

T4 = DeviceKind(
    name="t4",
    peak_flops_per_s={"fp32": 8.1 * TERA, "fp16": 65 * TERA, "int8": 130 * TERA},
    mem_capacity_bytes=16 * GIGA,
    mem_bw_bytes_per_s=320 * GIGA,
    efficiency=T4_EFFICIENCY,
    launch_overhead_s=GPU_LAUNCH_OVERHEAD_S,
    source="NVIDIA T4 data sheet; int8/fp16/fp32 (QSync); efficiency ASSUMED (70 W cap)",
)

A100 = DeviceKind(
    name="a100",
    peak_flops_per_s={"fp32": 19.5 * TERA, "tf32": 156 * TERA, "bf16": 312 * TERA,
                      "fp16": 312 * TERA, "int8": 624 * TERA},
    mem_capacity_bytes=80 * GIGA,
    mem_bw_bytes_per_s=2039 * GIGA,
    efficiency=GPU_EFFICIENCY,
    launch_overhead_s=GPU_LAUNCH_OVERHEAD_S,
    source="NVIDIA A100 SXM4 80 GB data sheet (dense); efficiency ASSUMED",
)

H100 = DeviceKind(
    name="h100",
    peak_flops_per_s={"fp32": 67 * TERA, "tf32": 495 * TERA, "bf16": 989 * TERA,
                      "fp16": 989 * TERA, "fp8": 1979 * TERA, "int8": 1979 * TERA},
    mem_capacity_bytes=80 * GIGA,
    mem_bw_bytes_per_s=3350 * GIGA,
    efficiency=GPU_EFFICIENCY,
    launch_overhead_s=GPU_LAUNCH_OVERHEAD_S,
    source="NVIDIA H100 SXM5 80 GB data sheet (dense); efficiency ASSUMED",
)

# --- links: bandwidth per direction, latency per hop ---------------------------------
#: Simba-class network-on-package link (docs/HARDWARE.md, *unconfirmed*).
NOP_BW_BYTES_PER_S = 100 * GIGA
NOP_LATENCY_S = 20e-9
#: NVLink totals are both directions together: A100 600 GB/s, H100 900 GB/s.
NVLINK3_BW_BYTES_PER_S = 600 * GIGA / 2
NVLINK4_BW_BYTES_PER_S = 900 * GIGA / 2
#: ASSUMPTION: 0.5 us per GPU<->NVSwitch link, so ~1 us GPU to GPU.
NVLINK_LATENCY_S = 0.5e-6
#: InfiniBand 4x port per direction: HDR 200 Gb/s, NDR 400 Gb/s; DGX nodes have 8 ports.
IB_HDR_PORT_BW_BYTES_PER_S = 200e9 / 8
IB_NDR_PORT_BW_BYTES_PER_S = 400e9 / 8
IB_PORTS_PER_NODE = 8
#: ASSUMPTION: 1 us per hop to and from the fabric switch (NIC + switch traversal).
IB_LATENCY_S = 1e-6
#: PCIe gen3 x16 per direction (docs/HARDWARE.md); ASSUMPTION 1 us per hop.
PCIE3_BW_BYTES_PER_S = 15.75 * GIGA
PCIE_LATENCY_S = 1e-6
#: ASSUMPTION: the two hosts of the mixed fleet share a 100 Gb/s network (EDR-class),
#: 2.5 us per host<->network hop.
NET_100G_BW_BYTES_PER_S = 100e9 / 8
NET_LATENCY_S = 2.5e-6

KINDS: dict[str, DeviceKind] = {k.name: k for k in (CHIPLET, V100, T4, A100, H100)}
