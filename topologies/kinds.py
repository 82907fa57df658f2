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
H200, B200 and GB200 data sheets quote tensor-core rates with 2:4 sparsity; the kinds
take half of them (dense), as NVIDIA's H100 sheet gives both. B200 is the HGX/DGX part
(1,000 W), GB200 the same Blackwell GPU in a GB200 NVL72 rack (1,200 W, higher rates); both
per GPU from the system's totals.
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

H200 = DeviceKind(
    name="h200",
    peak_flops_per_s={"fp32": 67 * TERA, "tf32": 495 * TERA, "bf16": 989 * TERA,
                      "fp16": 989 * TERA, "fp8": 1979 * TERA, "int8": 1979 * TERA},
    mem_capacity_bytes=141 * GIGA,
    mem_bw_bytes_per_s=4800 * GIGA,
    efficiency=GPU_EFFICIENCY,
    launch_overhead_s=GPU_LAUNCH_OVERHEAD_S,
    source="NVIDIA H200 Tensor Core GPU data sheet, H200 SXM: 1,979 TFLOPS bf16/fp16, 3,958 fp8/int8, "
           "989 tf32 with sparsity (halved: dense), 67 fp32; 141 GB HBM3e, 4.8 TB/s; the H100's GH100 "
           "compute; efficiency ASSUMED",
)

B200 = DeviceKind(
    name="b200",
    peak_flops_per_s={"fp32": 75 * TERA, "tf32": 1125 * TERA, "bf16": 2250 * TERA,
                      "fp16": 2250 * TERA, "fp8": 4500 * TERA, "int8": 4500 * TERA},
    mem_capacity_bytes=180 * GIGA,
    mem_bw_bytes_per_s=8000 * GIGA,
    efficiency=GPU_EFFICIENCY,
    launch_overhead_s=GPU_LAUNCH_OVERHEAD_S,
    source="NVIDIA DGX B200 / HGX B200 data sheet, per 8 GPUs: 36 PFLOPS bf16/fp16, 72 fp8, 72 POPS "
           "int8, 18 tf32 with sparsity (halved: dense), 600 TFLOPS fp32; 1,440 GB HBM3e, 64 TB/s; "
           "divided by 8; efficiency ASSUMED",
)

GB200 = DeviceKind(
    name="gb200",
    peak_flops_per_s={"fp32": 80 * TERA, "tf32": 1250 * TERA, "bf16": 2500 * TERA,
                      "fp16": 2500 * TERA, "fp8": 5000 * TERA, "int8": 5000 * TERA},
    mem_capacity_bytes=186 * GIGA,
    mem_bw_bytes_per_s=8000 * GIGA,
    efficiency=GPU_EFFICIENCY,
    launch_overhead_s=GPU_LAUNCH_OVERHEAD_S,
    source="NVIDIA GB200 NVL72 data sheet, per rack of 72 Blackwell GPUs: 360 PFLOPS bf16/fp16, 720 "
           "fp8, 720 POPS int8, 180 tf32 with sparsity (halved: dense), 5,760 TFLOPS fp32; 13.4 TB "
           "HBM3e (186 GB a GPU), 576 TB/s; divided by 72; efficiency ASSUMED",
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

#: NVLink5 (B200, GB200): 1.8 TB/s total per GPU (HGX/DGX B200: 14.4 TB/s over 8 GPUs;
#: GB200 NVL72: 130 TB/s over 72), 900 GB/s per direction.
NVLINK5_BW_BYTES_PER_S = 1800 * GIGA / 2
#: The scale-out port of every H100/H200/B200/GB200 GPU: one 400 Gb/s ConnectX-7 (NDR
#: InfiniBand or 400G Ethernet), 50 GB/s per direction (DGX H100/H200/B200: 8 per node).
RAIL_400G_BW_BYTES_PER_S = 400e9 / 8
#: Ports a leaf switch gives its GPUs in a non-blocking (1:1) tier: half of a 64-port
#: 400 Gb/s switch (NVIDIA Quantum-2 QM9700: 64 NDR ports), the other half going up. A DGX
#: SuperPOD scalable unit is 32 nodes with one such leaf per rail.
LEAF_DOWN_PORTS = 32

KINDS: dict[str, DeviceKind] = {k.name: k for k in (CHIPLET, V100, T4, A100, H100, H200, B200, GB200)}
