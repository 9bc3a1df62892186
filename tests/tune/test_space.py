"""tune's search space: defaults from the profile, the space file, candidates as profiles."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tune_helpers import M3, m3_settings

from servekit.errors import ConfigError
from servekit.plan.engine_rules import ESTIMATE_CUDAGRAPHS_ENV
from servekit.profiles import load_profile
from servekit.tune.feasibility import assess
from servekit.tune.space import Speculation, default_space, overrides, read_space, variant


def _m3_space() -> tuple[object, object]:
    profile = load_profile(M3)
    return profile, default_space(profile, graph_flag=True, reuse=False, needed_len=1152)


def test_default_space_surrounds_the_profile() -> None:
    """max_num_seqs 128 gives 32..256, speculation off and 1..k, every TPxDP split of 8 GPUs,
    chunked prefill on and off, and max_model_len 131072 plus the workload's 2048."""
    _, space = _m3_space()
    assert space.max_num_seqs == (32, 64, 128, 256)
    assert space.max_num_batched_tokens == (2048, 4096, 8192)
    assert [s.label() for s in space.speculation] == ["off", "k1", "k2", "k3"]
    assert space.gpu_memory_utilization == (0.9, 0.95, 0.99)
    assert space.estimate_cudagraphs == (True, False)
    assert space.parallel == ((1, 8), (2, 4), (4, 2), (8, 1))
    assert space.enable_prefix_caching == (True,)
    assert space.enable_chunked_prefill == (True, False)
    assert space.max_model_len == (131072, 2048)
    assert space.size == 4 * 3 * 4 * 3 * 2 * 4 * 1 * 2 * 2


def test_space_file_replaces_dimensions_and_parses_speculation() -> None:
    """A space file's keys replace their dimensions; off, K, 'K<=B' and schedules parse."""
    profile, base = _m3_space()
    data = yaml.safe_load(
        "max_num_seqs: [64, 16]\nspeculative: [off, 3, '2<=8', [[1, 4, 3], [5, 128, 1]]]\n"
        "parallel: ['8x1']\n"
    )
    space = read_space(data, "space.yaml", base, profile)
    assert space.max_num_seqs == (16, 64)
    assert space.speculation[0] == Speculation()
    assert space.speculation[1] == Speculation(3)
    assert space.speculation[2].label() == "k2<=8"
    assert space.speculation[3].schedule == ((1, 4, 3), (5, 128, 1))
    assert space.parallel == ((8, 1),)
    assert space.max_num_batched_tokens == base.max_num_batched_tokens
    # 'k up to batch B' ends at each candidate's max_num_seqs
    schedules = {
        c.speculation.schedule for c in space.candidates() if c.speculation.label() == "k2<=8"
    }
    assert schedules == {((1, 8, 2), (9, 16, 0)), ((1, 8, 2), (9, 64, 0))}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("max_num_seqs: []", "max_num_seqs is an empty list, so the space has no candidate"),
        ("max_num_seqs: [0]", "max_num_seqs 0 is not positive"),
        ("speculative: [5]", "5 draft tokens is outside 1..3"),
        ("speculative: ['x']", "is not off, K, 'K<=B'"),
        ("parallel: ['8']", "parallel '8' is not TPxDP"),
        ("gpu_memory_utilization: [1.5]", "outside (0, 1]"),
        ("bogus: [1]", "bogus: Extra inputs are not permitted"),
        ("- 1", "a space file is a mapping"),
    ],
)
def test_bad_space_file_is_one_config_line(text: str, said: str) -> None:
    """Each problem of a space file is one ConfigError naming the file and the key."""
    profile, base = _m3_space()
    with pytest.raises(ConfigError) as caught:
        read_space(yaml.safe_load(text), "space.yaml", base, profile)
    assert said in caught.value.message
    assert caught.value.message.startswith("space.yaml")


def test_speculation_without_a_draft_is_refused() -> None:
    """A profile without a speculative section cannot search speculation on."""
    profile = load_profile("llama-3.1-70b-4xh100")
    base = default_space(profile, graph_flag=True, reuse=False, needed_len=1152)
    assert [s.label() for s in base.speculation] == ["off"]
    with pytest.raises(ConfigError, match="needs a draft"):
        read_space({"speculative": [3]}, "s.yaml", base, profile)


def test_the_profile_itself_needs_no_override() -> None:
    """The candidate equal to the profile changes nothing."""
    profile = load_profile(M3)
    assert overrides(profile, m3_settings()) == {}


def test_overrides_name_only_what_changed() -> None:
    """Speculation off removes the section; the graph flag sets its variable; a schedule
    and a smaller max_num_seqs are the only serve and speculative keys written."""
    profile = load_profile(M3)
    off = overrides(profile, m3_settings(speculation=Speculation(), estimate_cudagraphs=True))
    assert off == {"speculative": None, "env": {ESTIMATE_CUDAGRAPHS_ENV: "1"}}
    schedule = ((1, 4, 3), (5, 64, 0))
    scheduled = overrides(
        profile, m3_settings(max_num_seqs=64, speculation=Speculation(3, schedule))
    )
    assert scheduled == {
        "serve_args": {"max_num_seqs": 64},
        "speculative": {
            "config": {"num_speculative_tokens_per_batch_size": [[1, 4, 3], [5, 64, 0]]}
        },
    }
    assert variant(profile, m3_settings(speculation=Speculation())).speculative is None


def test_a_profile_extending_the_input_with_the_overrides_is_the_variant(tmp_path: Path) -> None:
    """Written as `extends:` + overrides, the candidate loads back as the same deployment."""
    profile = load_profile(M3)
    settings = m3_settings(max_num_seqs=64, speculation=Speculation(2), estimate_cudagraphs=True)
    document = {"extends": M3, "name": "tuned", **overrides(profile, settings)}
    (tmp_path / "tuned.yaml").write_text(yaml.safe_dump(document))
    loaded = load_profile("tuned", extra_dirs=[tmp_path])
    expected = variant(profile, settings, name="tuned")
    assert loaded.model_dump(exclude={"description"}) == expected.model_dump(
        exclude={"description"}
    )


def test_feasibility_gives_the_planners_and_vllms_reasons() -> None:
    """TP4 cannot hold M3's weights; chunked prefill off needs a whole prompt in the budget;
    max_num_batched_tokens below max_num_seqs is refused; the profile's own setting is
    inside the planner's OOM risk and is marked, not refused."""
    profile = load_profile(M3)
    tp4 = assess(profile, m3_settings(tensor_parallel_size=4, data_parallel_size=2))
    assert not tp4.feasible
    assert "GiB" in (tp4.reason or "")
    unchunked = assess(profile, m3_settings(enable_chunked_prefill=False))
    assert unchunked.reason is not None
    assert "must hold a whole max_model_len 131072 prompt" in unchunked.reason
    small = assess(profile, m3_settings(max_num_batched_tokens=64))
    assert small.reason is not None
    assert "below max_num_seqs 128" in small.reason
    own = assess(profile, m3_settings())
    assert own.feasible
    assert own.oom_risk is not None
    assert "OOM risk during graph capture" in own.oom_risk
    assert own.kv_cache_tokens > 0
    safe = assess(profile, m3_settings(estimate_cudagraphs=True))
    assert safe.feasible
    assert safe.oom_risk is None
    assert safe.kv_cache_tokens < own.kv_cache_tokens  # the estimate takes KV memory
