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
the profiling run's dummy sampler. Its size (NCCL's per-channel connection buffers:
NCCL_BUFFSIZE 4 MiB for SIMPLE plus the LL and LL128 FIFOs, times the channels NCCL's
topology search chooses) is not derivable without the machine's topology, so the plan
does not add it: it warns, quoting the public measurement below. Pipeline parallelism's
send/recv uses PyNccl, created at init, and the profiling run sends nothing, so it adds no
such term. NVLS
multicast buffers are not the cause at TP2: NCCL turns NVLS off for two GPUs or fewer
(src/transport/nvls.cc ncclNvlsInit, NCCL 2.27).
"""

from __future__ import annotations

from servekit.plan.inputs import PlanInputs

# vLLM PR #10511 (Dec 2024), Meta-Llama-3-8B on an 80GB H100: non_torch_memory 1.79 GiB at
# TP1 and 3.58 GiB at TP2 (that release counted every communicator and the CUDA context).
PUBLIC_TP_FIGURE = (
    "vLLM PR #10511 measured 1.79 GiB more non-torch memory at TP2 than at TP1 (Llama-3-8B, "
    "H100 80GB)"
)


def comm_memory_warnings(inputs: PlanInputs) -> list[str]:
    """Warnings for communication memory the release creates inside the budget, unplanned."""
    rules = inputs.accounting
    tp = inputs.tensor_parallel_size
    if tp == 1 or not rules.lazy_tp_communicator or rules.distributed_init_in_budget:
        return []
    return [
        f"vLLM {rules.version} creates PyTorch's NCCL communicator for the TP{tp} group at the "
        "profiling run's logits all-gather, after its memory snapshot, so its buffers count "
        f"as non-torch memory; not planned (size depends on NCCL's channels): "
        f"{PUBLIC_TP_FIGURE}; expect up to that much less KV cache per GPU"
    ]
