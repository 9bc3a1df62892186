"""Embeddings under pipeline parallelism: model families whose vLLM model file builds the
embedding and LM head on every stage hold both tables on every stage; Llama-style files hold
them on the first and last stage only."""

from __future__ import annotations

import dataclasses

from known_models import corpus_config

from servekit.hardware import lookup_gpu
from servekit.plan.inputs import PlanInputs, model_spec
from servekit.plan.model_config import model_facts_from_config
from servekit.plan.weights import weights_per_gpu


def _embeddings(model: str, *, tp: int, pp: int) -> tuple[bool, float]:
    arch = model_facts_from_config(corpus_config(model)).architecture
    inputs = PlanInputs(model=model_spec("m", arch, "bf16"), gpu=lookup_gpu("h100"), draft=None,
                        max_model_len=8192, tensor_parallel_size=tp,
                        pipeline_parallel_size=pp)  # fmt: skip
    return arch.embeddings_on_every_stage, weights_per_gpu(inputs).embeddings_bytes


def test_qwen3_moe_keeps_both_tables_on_every_stage() -> None:
    """Qwen3-30B-A3B-2507 at TP4 PP2: embed_tokens and lm_head (untied), each 151,936 x 2048
    / 4 x 2 B, on every stage, as vLLM's qwen3_moe.py builds them."""
    every, embeddings = _embeddings("Qwen/Qwen3-30B-A3B-Instruct-2507", tp=4, pp=2)
    assert every is True
    assert embeddings == 2 * 151_936 * 2048 / 4 * 2


def test_llama_keeps_one_table_per_end_stage() -> None:
    """Llama-3.1-8B at PP2: the first stage holds the embedding, the last the LM head."""
    every, embeddings = _embeddings("meta-llama/Llama-3.1-8B-Instruct", tp=1, pp=2)
    assert every is False
    assert embeddings == 128_256 * 4096 * 2


def test_without_pipeline_parallelism_the_fact_changes_nothing() -> None:
    """At PP1 every family holds both tables either way."""
    arch = model_facts_from_config(corpus_config("Qwen/Qwen3-30B-A3B-Instruct-2507")).architecture
    plain = dataclasses.replace(arch, embeddings_on_every_stage=False)
    gpu = lookup_gpu("h100")
    a, b = (weights_per_gpu(PlanInputs(model=model_spec("m", x, "bf16"), gpu=gpu, draft=None,
                                       max_model_len=8192)).total_bytes
            for x in (arch, plain))  # fmt: skip
    assert a == b
