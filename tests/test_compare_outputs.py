"""``scripts/compare_outputs.py`` on two hand-made checkouts: what counts as a difference (an output's
md5, a score's last bit, a document gone) and what does not (provenance, timings, a new document)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import yaml

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compare_outputs.py"
_spec = importlib.util.spec_from_file_location("compare_outputs", SCRIPT)
compare_outputs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare_outputs)


def checkout(root: Path, model_md5: str, avg: float, commit: str, extra: bool = False) -> Path:
    outs = [{"path": "models/m/infonce/seed1", "md5": model_md5}, {"path": "metrics/eval", "md5": commit}]
    lock = {"schema": "2.0", "stages": {"train": {"outs": outs}}}
    (root / "metrics" / "eval").mkdir(parents=True)
    (root / "dvc.lock").write_text(yaml.safe_dump(lock))
    doc = {"avg": avg, "tasks": {"STS12": 70.5}, "wall_seconds": 10.0 + avg, "meta": {"git_commit": commit}}
    (root / "metrics" / "eval" / "m-infonce-seed1.json").write_text(json.dumps(doc))
    if extra:
        (root / "metrics" / "summary.json").write_text(json.dumps({"infonce.avg": avg}))
    return root


def test_provenance_timings_and_new_documents_are_not_differences(tmp_path) -> None:
    before = checkout(tmp_path / "a", "d41d8c", 75.25, "aaaa")
    after = checkout(tmp_path / "b", "d41d8c", 75.25, "bbbb", extra=True)
    problems, n_outs, n_docs, new = compare_outputs.compare(before, after)
    assert (problems, n_outs, n_docs) == ([], 1, 1)
    assert new == ["metrics/summary.json"]


def test_an_md5_a_last_bit_and_a_missing_document_are(tmp_path, monkeypatch, capsys) -> None:
    before = checkout(tmp_path / "a", "d41d8c", 75.25, "aaaa", extra=True)
    after = checkout(tmp_path / "b", "0cc175", 75.25 + 2**-40, "aaaa")
    monkeypatch.setattr(sys, "argv", ["compare_outputs.py", str(before), str(after)])
    assert compare_outputs.main() == 1
    out = capsys.readouterr().out
    assert "dvc.lock models/m/infonce/seed1: md5 d41d8c vs 0cc175" in out
    assert "metrics/eval/m-infonce-seed1.json/avg: 75.25 vs" in out
    assert "metrics/summary.json: only in before" in out
    assert out.rstrip().endswith("differ (3 differences)")


def test_an_old_significance_document_is_read_in_the_per_loss_shape() -> None:
    old = {"treatment": "focal_infonce", "backbones": {"m": {"ttest": {"p": 0.2}, "paired_seeds": [1, 2]}}}
    new = {
        "backbones": {
            "m": {"ttest": {"focal_infonce": {"p": 0.2}}, "paired_seeds": {"focal_infonce": [1, 2]}}
        }
    }
    assert compare_outputs.normalise_significance(old) == new
    assert (
        compare_outputs.diff(compare_outputs.normalise_significance(json.loads(json.dumps(new))), new) == []
    )


def _move(root: Path) -> None:
    """The checkout's outputs at the paths after SimCSE's items gained their framework component."""
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    lock["stages"]["train"]["outs"][0]["path"] = "models/simcse/m/infonce/seed1"
    (root / "dvc.lock").write_text(yaml.safe_dump(lock))
    old = root / "metrics" / "eval" / "m-infonce-seed1.json"
    old.rename(old.with_name("simcse-m-infonce-seed1.json"))


MAP = ["^models/(?!generators/)=models/simcse/", r"^(metrics/(train|eval|curves/loss|curves/dev)/)=\1simcse-"]


def test_a_path_map_compares_moved_outputs_and_still_finds_a_difference(
    tmp_path, monkeypatch, capsys
) -> None:
    before = checkout(tmp_path / "a", "d41d8c", 75.25, "aaaa")
    after = checkout(tmp_path / "b", "d41d8c", 75.25, "bbbb")
    _move(after)
    unmapped, _, n_docs, _ = compare_outputs.compare(before, after)
    assert "metrics/eval/m-infonce-seed1.json: only in before" in unmapped and n_docs == 0
    assert compare_outputs.compare(before, after, compare_outputs.parse_map(MAP))[:3] == ([], 1, 1)
    moved_off = checkout(tmp_path / "c", "0cc175", 75.5, "cccc")
    _move(moved_off)
    argv = ["compare_outputs.py", str(before), str(moved_off), *(a for m in MAP for a in ("--map", m))]
    monkeypatch.setattr(sys, "argv", argv)
    assert compare_outputs.main() == 1
    out = capsys.readouterr().out
    assert "dvc.lock models/simcse/m/infonce/seed1: md5 d41d8c vs 0cc175" in out
    assert "metrics/eval/simcse-m-infonce-seed1.json/avg: 75.25 vs 75.5" in out
