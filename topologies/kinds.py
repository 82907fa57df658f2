"""Device kinds and link figures the presets are built from, each with its source.

Every number comes from docs/HARDWARE.md (vendor data sheets and papers) unless it is
marked ASSUMPTION, with the reason next to it. Units: peaks are dense FLOP/s (no
sparsity; data-sheet rates quoted with 2:4 sparsity are halved; int8 TOPS counted as
FLOP/s), memory is the marketed capacity in decimal bytes (80 GB = 80e9), bandwidths
bytes/s, launch overheads seconds. ASSUMED: GPU efficiency 0.7 of dense peak (T4 0.6),
5 us launch overhead per GPU task (a compiled or graph-captured runtime), and for the
Simba-class ``CHIPLET`` 64 MiB stacked SRAM at 2 TB/s, fp8 at the int8 rate, fp16/bf16
at half of it, fp32 at 1/8 of fp16, efficiency 0.75, 1 us per task.

Sources, assumptions and the H200 calibration: docs/HARDWARE.md.
"""
from __future__ import annotations

from distplan.topologies.topology import DeviceKind

TERA = 1e12
GIGA = 1e9
MIB = 2**20

GPU_EFFICIENCY = 0.7

# --- host: the host<->GPU link per direction and the host memory a GPU's share streams --
#: ASSUMPTION: pinned-memory copies reach 0.8 of a link's raw rate (PCIe Gen4 x16 copies
#: measure about 25 of 31.5 GB/s); applied to NVLink-C2C too.
HOST_LINK_ACHIEVED = 0.8
PCIE3_X16_BYTES_PER_S = 15.75 * GIGA * HOST_LINK_ACHIEVED   # V100, T4
PCIE4_X16_BYTES_PER_S = 32 * GIGA * HOST_LINK_ACHIEVED      # A100 (DGX A100)
PCIE5_X16_BYTES_PER_S = 64 * GIGA * HOST_LINK_ACHIEVED      # H100, H200, B200 (DGX H100/H200/B200)
NVLINK_C2C_BYTES_PER_S = 450 * GIGA * HOST_LINK_ACHIEVED    # GB200: 900 GB/s both directions
#: ASSUMPTION: the host CPU streams Adam at 0.6 of its sockets' peak DDR bandwidth
#: (STREAM-class), split evenly over the node's GPUs. Peaks: DGX-1 2 x 4 ch DDR4-2400
#: (153.6 GB/s, 8 GPUs), DGX A100 2 x 8 ch DDR4-3200 (409.6, 8), DGX H100/H200 2 x 8 ch
#: DDR5-4800 (614.4, 8), DGX B200 2 x 8 ch DDR5-5600 (716.8, 8), GB200 one Grace's
#: LPDDR5X 512 GB/s per 2 GPUs.
HOST_MEM_ACHIEVED = 0.6
#: fp8 GEMMs reach a lower fraction of their (twice as high) peak than bf16 ones: the best
#: fractions `bench/calibrate_gpu.py` measured on an H200 (bench/results/calibration-h200.json,
#: 8192^3: fp8 0.721, bf16 0.790); the fp8 efficiency is the bf16 one times their ratio,
#: 0.7 x 0.913 = 0.639 (Hopper measured; Blackwell ASSUMED the same ratio). Fixed before the
#: fidelity table's H rows were re-run with it, not fitted to them.
FP8_GEMM_RATIO = 0.721 / 0.790
FP8_EFFICIENCY = GPU_EFFICIENCY * FP8_GEMM_RATIO
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
    host_link_bytes_per_s=PCIE3_X16_BYTES_PER_S,
    host_mem_bw_bytes_per_s=153.6 * GIGA / 8 * HOST_MEM_ACHIEVED,
    source="NVIDIA V100 SXM2 32 GB data sheet; fp16/fp32 only (QSync); efficiency ASSUMED",
)

T4 = DeviceKind(
    name="t4",
    peak_flops_per_s={"fp32": 8.1 * TERA, "fp16": 65 * TERA, "int8": 130 * TERA},
    mem_capacity_bytes=16 * GIGA,
    mem_bw_bytes_per_s=320 * GIGA,
    efficiency=T4_EFFICIENCY,
    launch_overhead_s=GPU_LAUNCH_OVERHEAD_S,
    host_link_bytes_per_s=PCIE3_X16_BYTES_PER_S,
    host_mem_bw_bytes_per_s=153.6 * GIGA / 8 * HOST_MEM_ACHIEVED,
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
    host_link_bytes_per_s=PCIE4_X16_BYTES_PER_S,
    host_mem_bw_bytes_per_s=409.6 * GIGA / 8 * HOST_MEM_ACHIEVED,
    source="NVIDIA A100 SXM4 80 GB data sheet (dense); efficiency ASSUMED",
)

H100 = DeviceKind(
    name="h100",
    peak_flops_per_s={"fp32": 67 * TERA, "tf32": 495 * TERA, "bf16": 989 * TERA,
                      "fp16": 989 * TERA, "fp8": 1979 * TERA, "int8": 1979 * TERA},
    mem_capacity_bytes=80 * GIGA,
    mem_bw_bytes_per_s=3350 * GIGA,
    efficiency=GPU_EFFICIENCY,
    precision_efficiency={"fp8": FP8_EFFICIENCY},
    launch_overhead_s=GPU_LAUNCH_OVERHEAD_S,
    host_link_bytes_per_s=PCIE5_X16_BYTES_PER_S,
    host_mem_bw_bytes_per_s=614.4 * GIGA / 8 * HOST_MEM_ACHIEVED,
    source="NVIDIA H100 SXM5 80 GB data sheet (dense); efficiency ASSUMED",
)

H200 = DeviceKind(
    name="h200",
    peak_flops_per_s={"fp32": 67 * TERA, "tf32": 495 * TERA, "bf16": 989 * TERA,
                      "fp16": 989 * TERA, "fp8": 1979 * TERA, "int8": 1979 * TERA},
    mem_capacity_bytes=141 * GIGA,
    mem_bw_bytes_per_s=4800 * GIGA,
    efficiency=GPU_EFFICIENCY,
    precision_efficiency={"fp8": FP8_EFFICIENCY},
    launch_overhead_s=GPU_LAUNCH_OVERHEAD_S,
    host_link_bytes_per_s=PCIE5_X16_BYTES_PER_S,
    host_mem_bw_bytes_per_s=614.4 * GIGA / 8 * HOST_MEM_ACHIEVED,
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
    precision_efficiency={"fp8": FP8_EFFICIENCY},
    launch_overhead_s=GPU_LAUNCH_OVERHEAD_S,
    host_link_bytes_per_s=PCIE5_X16_BYTES_PER_S,
    host_mem_bw_bytes_per_s=716.8 * GIGA / 8 * HOST_MEM_ACHIEVED,
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
    precision_efficiency={"fp8": FP8_EFFICIENCY},
    launch_overhead_s=GPU_LAUNCH_OVERHEAD_S,
    host_link_bytes_per_s=NVLINK_C2C_BYTES_PER_S,
    host_mem_bw_bytes_per_s=512 * GIGA / 2 * HOST_MEM_ACHIEVED,
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
