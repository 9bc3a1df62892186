"""Names checked by a regex match the whole text: a trailing newline is never accepted."""

from __future__ import annotations

import pytest

from servekit.errors import ConfigError
from servekit.profiles import load_profile
from servekit.render._k8s_pod import namespace
from servekit.render.argv import vllm_serve_args
from servekit.render.image import check_buildable

PATCHED = "minimax-m3-mxfp8-8xa800-v0251-patched"


def test_namespace_with_a_trailing_newline_is_refused() -> None:
    """deploy.namespace 'default\\n' is not a DNS label."""
    profile = load_profile(PATCHED)
    deploy = profile.deploy.model_copy(update={"namespace": "default\n"})
    with pytest.raises(ConfigError, match="is not a Kubernetes namespace name"):
        namespace(profile.model_copy(update={"deploy": deploy}))


def test_extra_flag_with_a_trailing_newline_is_refused() -> None:
    """An extra_args flag name ending in a newline is not a vLLM flag name."""
    profile = load_profile(
        PATCHED, overrides=['serve_args.extra_args={"disable-log-requests\\n": true}']
    )
    with pytest.raises(ConfigError, match="is not a vLLM flag name"):
        vllm_serve_args(profile)


@pytest.mark.parametrize(
    "override",
    [
        "engine.patches.0.name=m3fix\n",
        "engine.image=vllm/vllm-openai:v0.25.1\n",
        "engine.patched_image_tag=vllm/vllm-openai:v0.25.1-m3patch\n",
    ],
)
def test_image_names_with_a_trailing_newline_are_refused(override: str) -> None:
    """Patch names and image references ending in a newline are refused before a build."""
    profile = load_profile(PATCHED)
    key, _, value = override.partition("=")
    data = profile.model_dump(by_alias=True)
    target = data
    parts = key.split(".")
    for part in parts[:-1]:
        target = target[int(part)] if part.isdigit() else target[part]
    target[parts[-1]] = value
    with pytest.raises(ConfigError):
        check_buildable(type(profile).model_validate(data))
