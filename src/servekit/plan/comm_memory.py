"""Communication memory inside vLLM's KV budget under parallelism (core): what is not planned.

vLLM's non-torch figure is the growth of device memory not held by PyTorch from the worker's
initial memory snapshot to the end of its profiling run (utils/mem_utils.py
memory_profiling). Everything communication needs that exists before the snapshot is
outside the budget; anything created during profiling is inside it.

From v0.11.0 the distributed environment is initialised before the snapshot
(v1/worker/gpu_worker.py init_device), so PyNccl's communicator and its warm-up
all-reduce, the custom all-reduce IPC buffers (custom_all_reduce.py: 8 MiB max_size,
allocated in __init__) and the torch symmetric-memory all-reduce buffer (symm_mem.py,
allocated in __init__) are all outside it. What is left is PyTorch's own NCCL
communicator for the tensor-parallel group: vLLM gathers the logits with
`tensor_model_parallel_all_gather`, which up to v0.21.0 reaches
base_device_communicator.py all_gather, i.e. torch.distributed.all_gather_into_tensor on
the device group; init_process_group is called without device_id (parallel_state.py), so
PyTorch creates that NCCL communicator at its first collective ("the normal lazy call"
of ncclCommInit*, torch/distributed/distributed_c10d.py init_process_group docstring),
the profiling run's dummy sampler.

Its size is not planned: no buffer count reproduces the public figures (`PUBLIC_FIGURES`,
docs/memory-model.md section 5). One NCCL connection holds the SIMPLE FIFO
(NCCL_BUFFSIZE, 4 MiB), the LL FIFO (8 lines x 512 threads x 8 steps x 16 B = 512 KiB) and
the LL128 FIFO (120 x 640 x 8 x 8 B = 4.6875 MiB): 9.19 MiB, 10 MiB once cuMem rounds it to
2 MiB (NVIDIA/nccl#1685 counts 10485760- and 2097152-byte allocations per channel). An
all-gather connects only the ring (NCCL_RUNTIME_CONNECT, NCCL 2.22+): on H100 NVSwitch, 32
channels x (10 + 2) MiB = 0.375 GiB, plus NVLS from three GPUs (16 channels x 2 x 8 steps x
128 KiB x TP heads, src/transport/nvls.cc ncclNvlsBufferSetup, NCCL 2.27: 0.125 GiB at
TP4). The public vLLM figures on NVLink GPUs are 1.8-2.1 GiB, four to five times that, and
on PCIe GPUs (two to four channels) at most 0.25 GiB of non-torch memory in all. So the
plan warns with the range for the GPU's interconnect instead. Pipeline parallelism's
send/recv uses PyNccl, created at init, and the profiling run sends nothing, so it adds no
such term. NVLS multicast buffers are not the cause at TP2: NCCL turns NVLS off for two
GPUs or fewer (src/transport/nvls.cc ncclNvlsInit, NCCL 2.27).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from servekit.plan.inputs import PlanInputs

Link = Literal["nvlink", "pcie"]


@dataclass(frozen=True, slots=True)
class PublicFigure:
    """One published vLLM startup's non-torch figure under tensor parallelism.

    Attributes:
        url: where the log is published.
        gpu: the GPU model and how the GPUs are linked, as the source states it.
        link: "nvlink" (NVLink or NVSwitch between the TP GPUs) or "pcie".
        tp: the tensor-parallel size.
        vllm: the vLLM release the log names.
        non_torch_gib: the non-torch figure the log prints at that TP size.
        tp1_gib: the same source's TP1 figure, None when it printed none.
    """

    url: str
    gpu: str
    link: Link
    tp: int
    vllm: str
    non_torch_gib: float
    tp1_gib: float | None = None

    @property
    def tp_excess_gib(self) -> float:
        """The non-torch memory tensor parallelism added (the whole figure without a TP1 one)."""
        return self.non_torch_gib - (self.tp1_gib or 0.0)


# Outside the project's corpus. Releases before v0.11.0 create every communicator inside the
# budget, so their figures bound what the lazy communicator alone adds from v0.11.0.
PUBLIC_FIGURES: tuple[PublicFigure, ...] = (
    PublicFigure(
        "https://github.com/vllm-project/vllm/pull/10511",
        "H100 80GB (NVSwitch)",
        "nvlink",
        2,
        "0.6.5 (V0)",
        3.58,
        1.79,
    ),
    PublicFigure(
        "https://github.com/aws-samples/aws-ai-ml-workshop-kr/tree/master/genai/aws-gen-ai-kr/"
        "40_inference/06-Deepseek-v2-Inference",
        "8x A100-SXM4-40GB (p4d.24xlarge, NVSwitch)",
        "nvlink",
        8,
        "0.7.1 (V0)",
        2.10,
    ),
    PublicFigure(
        "https://github.com/vllm-project/vllm/issues/13061",
        "2x RTX 4090 (PCIe)",
        "pcie",
        2,
        "0.7.x (V0)",
        0.25,
    ),
)

# vLLM PR #10511 (Dec 2024), Meta-Llama-3-8B on an 80GB H100: non_torch_memory 1.79 GiB at
# TP1 and 3.58 GiB at TP2 (that release counted every communicator and the CUDA context).
PUBLIC_TP_FIGURE = (
    "vLLM PR #10511 measured 1.79 GiB more non-torch memory at TP2 than at TP1 (Llama-3-8B, "
    "H100 80GB)"
)


def public_range_gib(link: Link) -> tuple[float, float]:
    """The smallest and largest non-torch memory tensor parallelism added in `PUBLIC_FIGURES`."""
    excess = [f.tp_excess_gib for f in PUBLIC_FIGURES if f.link == link]
    return min(excess), max(excess)


def gpu_link(inputs: PlanInputs) -> Link:
    """How the plan's GPUs are linked: NVLink when the catalog gives the GPU an NVLink rate."""
    return "nvlink" if inputs.gpu.nvlink_gb_s else "pcie"


def comm_memory_warnings(inputs: PlanInputs) -> list[str]:
    """Warnings for communication memory the release creates inside the budget, unplanned."""
    rules = inputs.accounting
    tp = inputs.tensor_parallel_size
    if tp == 1 or not rules.lazy_tp_communicator or rules.distributed_init_in_budget:
        return []
    link = gpu_link(inputs)
    low, high = public_range_gib(link)
    lead = (
        f"vLLM {rules.version} creates PyTorch's NCCL communicator for the TP{tp} group at the "
        "profiling run's logits all-gather, after its memory snapshot, so its buffers count "
        "as non-torch memory; not planned (size depends on NCCL's channels): "
    )
    if link == "nvlink":
        return [
            lead + f"{PUBLIC_TP_FIGURE}; public TP2-TP8 figures on NVLink GPUs add "
            f"{low:.2f}-{high:.2f} GiB per GPU; expect up to that much less KV cache per GPU"
        ]
    return [
        lead + f"on GPUs without NVLink NCCL uses few channels: public TP2 figures over PCIe "
        f"print at most {high:.2f} GiB of non-torch memory in all; expect up to that much "
        "less KV cache per GPU"
    ]
