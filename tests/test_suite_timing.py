"""scripts/suite_timing.py: reading pytest's summary line, and the docs sentence rendered from its record."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _suite_timing():
    spec = importlib.util.spec_from_file_location("suite_timing", REPO / "scripts" / "suite_timing.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("line", "want"),
    [
        (
            "1231 passed, 1 skipped in 1014.22s (0:16:54)",
            {"passed": 1231, "skipped": 1, "pytest_seconds": 1014},
        ),
        (
            "==== 3 failed, 1208 passed, 1 skipped, 2 errors in 1755.60s (0:29:15) ====",
            {"failed": 3, "passed": 1208, "skipped": 1, "error": 2, "pytest_seconds": 1756},
        ),
        ("12 passed in 0.41s", {"passed": 12, "pytest_seconds": 0}),
    ],
)
def test_the_last_summary_line_gives_the_counts_and_seconds(line, want) -> None:
    log = f"bringing up nodes...\n....F.\n[gw0] 3 passed in 9.00s (an earlier line)\n{line}\n"
    assert _suite_timing().parse_pytest_log(log) == want


def test_a_log_without_a_summary_is_refused() -> None:
    with pytest.raises(ValueError, match="did not finish"):
        _suite_timing().parse_pytest_log("bringing up nodes...\n.....\nKilled\n")


def test_failed_tests_are_read_from_the_summary() -> None:
    log = "FAILED tests/a.py::t[False] - AssertionError\nERROR tests/b.py::u\nSKIPPED [1] tests/c.py:3: no\n"
    assert _suite_timing().failed_tests(log) == ["tests/a.py::t[False]", "tests/b.py::u"]


def test_cpu_kinds_are_named_as_the_docs_name_them() -> None:
    kind = _suite_timing().cpu_kind
    assert kind("AMD EPYC 9B14") == "AMD EPYC"
    assert kind("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz") == "Intel Xeon"
    assert kind("Apple M2") == "Apple M2"


def test_the_sentence_says_counts_times_and_the_target(tmp_path) -> None:
    from focalcse.evidence.docs_blocks import suite_sentence

    rec = {
        "command": ".ci/run",
        "commit": "abc1234",
        "setup": "a fresh clone",
        "cpu": "AMD EPYC",
        "cores": 2,
        "date": "2026-12-04",
        "passed": 1232,
        "skipped": 1,
        "failed": 0,
        "error": 0,
        "pytest_seconds": 1014,
        "workers": 2,
        "total_seconds": 1125,
        "target_seconds": 1500,
    }
    (tmp_path / "t.json").write_text(json.dumps(rec))
    said = suite_sentence("t.json", tmp_path)
    assert "`abc1234`" in said and "1232 passed, 1 skipped;" in said and "failed" not in said
    assert "pytest 1014 s on 2 pytest-xdist workers, 1125 s in all (under the 25-minute target)" in said
    rec = {**rec, "failed": 1, "total_seconds": 1600, "failures": ["tests/a.py::t"]}
    (tmp_path / "t.json").write_text(json.dumps(rec))
    said = suite_sentence("t.json", tmp_path)
    assert "1 failed" in said and "(over the 25-minute target). Failed: `tests/a.py::t`." in said
    ref = {"command": "python -c 'import torch'", "before_s": 5.9, "after_s": 11.6}
    (tmp_path / "t.json").write_text(json.dumps({**rec, "reference": ref}))
    said = suite_sentence("t.json", tmp_path)
    assert "`python -c 'import torch'` took 5.9 s before the run and 11.6 s after it" in said


def test_the_reference_is_a_median_of_fresh_processes() -> None:
    mod = _suite_timing()
    mod.REFERENCE = "import time; time.sleep(0.2)"
    assert 0.2 <= mod.reference_seconds(sys.executable, runs=3) < 5
