"""Shared planner fixtures; `known_models` (hand-written architectures) is importable."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from servekit.hardware import lookup_gpu
from servekit.plan import PlanInputs, plan_inputs
from servekit.profiles import load_profile

HERE = str(Path(__file__).parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)


@pytest.fixture
def inputs_for() -> Callable[..., PlanInputs]:
    """Build planner inputs for a built-in profile with optional overrides."""

    def build(name: str, *overrides: str) -> PlanInputs:
        profile = load_profile(name, overrides=list(overrides))
        return plan_inputs(profile, lookup_gpu(profile.hardware.gpu))

    return build
