"""The pipeline benchmark's mean bar: rescaled only against the reference old build."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2] / "."


@pytest.fixture(scope="module")
def turns() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "pipeline_turns_under_test", ROOT / "benchmarks" / "pipeline_turns.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def build(mean: float, median_round: float) -> dict[str, float]:
    return {"mean_us": mean, "median_round_mean_us": median_round, "cpu_us": mean}


def test_the_rescaled_mean_is_judged_by_the_larger_ratio(turns: ModuleType) -> None:
    old = build(200.0, 200.0)
    reference = turns.ISSUE_OLD_COMMIT
    rescaled, absolute = turns.mean_bars(build(100.0, 100.0), old, old_commit=reference)
    assert rescaled[1] is True and "45.8 us" in rescaled[2]  # 0.5 x 91.5
    assert absolute[1] is None  # printed, not judged, against the reference build
    # Pooled mean passes (0.45) but the median round fails (0.6): it fails.
    rescaled, _ = turns.mean_bars(build(90.0, 120.0), old, old_commit=reference)
    assert rescaled[1] is False and "ratio 0.600" in rescaled[2]


@pytest.mark.parametrize("commit", ["0123abc", "befb11d+"])
def test_another_old_build_judges_the_absolute_mean(
    turns: ModuleType, commit: str
) -> None:
    rescaled, absolute = turns.mean_bars(
        build(40.0, 40.0), build(200.0, 200.0), old_commit=commit
    )
    assert rescaled[1] is None and f"the old build is {commit}" in rescaled[0]
    assert absolute[1] is True  # 40 us <= 50 us, absolute
    _, absolute = turns.mean_bars(
        build(60.0, 60.0), build(200.0, 200.0), old_commit=commit
    )
    assert absolute[1] is False
