"""The check stage refuses bf16 on a CPU without bf16 matmul instructions (steps.check.check_precision)."""

from __future__ import annotations

from pathlib import Path

import pytest

from focalcse.config import ConfigError, load_params
from focalcse.paramsets import load_set
from focalcse.steps.check import SLOW_BF16_ENV, check_precision

REPO = Path(__file__).resolve().parents[1]
AVX2 = {"cpu_model": "AMD EPYC", "cpu_flags": ["avx2"]}
AVX512_BF16 = {"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "avx512f", "avx512_bf16"]}
AMX = {"cpu_model": "Intel(R) Xeon(R)", "cpu_flags": ["avx2", "avx512f", "amx_tile", "amx_bf16"]}


@pytest.fixture
def strict(monkeypatch):
    monkeypatch.delenv(SLOW_BF16_ENV, raising=False)


def test_the_default_is_fp32_and_passes_on_an_avx2_cpu(strict) -> None:
    params = load_params(REPO / "params.yaml")
    assert params.train.precision == "fp32" and params.eval.precision == "fp32"
    check_precision(params, AVX2)


def test_the_bf16_set_is_refused_on_an_avx2_cpu_with_the_way_on(strict) -> None:
    params = load_set(REPO, "cpu-bf16")
    assert params.train.precision == "bf16" and params.eval.precision == "bf16"
    with pytest.raises(ConfigError) as e:
        check_precision(params, AVX2)
    msg = str(e.value)
    assert "\n" not in msg
    assert "train.precision and eval.precision = 'bf16'" in msg
    assert "AMD EPYC; flags avx2; expected one of avx512_bf16, amx_bf16" in msg
    assert "the CPU default is fp32 (`make reproduce`, params.yaml" in msg and f"{SLOW_BF16_ENV}=1" in msg


@pytest.mark.parametrize("cpu", [AVX512_BF16, AMX, {"cpu_model": "arm64", "cpu_flags": []}])
def test_bf16_passes_where_the_cpu_has_it_or_its_flags_are_unknown(strict, cpu) -> None:
    check_precision(load_set(REPO, "cpu-bf16"), cpu)


def test_a_gpu_set_is_not_asked_about_the_cpu(strict) -> None:
    params = load_set(REPO, "paper")  # device cuda; eval fp32
    assert all(params.train_config(b, lo, s, f).device == "cuda" for f, b, lo, s in params.framework_items())
    check_precision(params, AVX2)


def test_the_variable_runs_bf16_anyway(monkeypatch) -> None:
    monkeypatch.setenv(SLOW_BF16_ENV, "1")
    check_precision(load_set(REPO, "cpu-bf16"), AVX2)
