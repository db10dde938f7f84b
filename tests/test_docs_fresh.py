"""The numbers of README.md and docs/*.md are rendered from the committed result files (cog blocks
calling :mod:`focalcse.report.docs_blocks`): the committed text must be what ``make docs`` writes, and
changing one committed result value must make the check fail."""

from __future__ import annotations

import io
import json
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from cogapp import Cog

ROOT = Path(__file__).resolve().parents[1]
SET_FILES = ("significance.json", "summary.json", "provenance.json")


def documents(root: Path) -> list[str]:
    return ["README.md", *sorted(p.relative_to(root).as_posix() for p in (root / "docs").glob("*.md"))]


def cog_check(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """``cog --check`` over the documents of ``root``, run there (as ``make docs-check``)."""
    monkeypatch.chdir(root)
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(out):
        status = Cog().main(["cog", "--check", *documents(root)])
    return status, out.getvalue()


def test_every_rendered_block_is_what_make_docs_writes(monkeypatch) -> None:
    status, out = cog_check(ROOT, monkeypatch)
    assert status == 0, f"stale rendered blocks (run `make docs`):\n{out}"


def test_the_documents_have_rendered_blocks() -> None:
    readme = (ROOT / "README.md").read_text()
    results = (ROOT / "docs/results.md").read_text()
    for name in ("sts_table", "compare_sentence", "frameworks_table", "sets_table"):
        assert f"d.{name}(" in readme
    for name in ("provenance", "compare_table", "ablation_tables", "table3_default", "grad_norm_sentence"):
        assert f"d.{name}(" in results


def copy_checkout(dst: Path) -> Path:
    """The documents, params and committed result and benchmark files, without the rest of the checkout."""
    for name in ("README.md", "params.yaml"):
        shutil.copy2(ROOT / name, dst / name)
    for folder in ("docs", "metrics", "params"):
        shutil.copytree(ROOT / folder, dst / folder)
    # docs/performance.md renders the committed benchmark files
    shutil.copytree(
        ROOT / "benchmarks", dst / "benchmarks", ignore=shutil.ignore_patterns("*.py", "__pycache__", "*.sh")
    )
    (dst / "reports").mkdir()
    shutil.copy2(ROOT / "reports/provenance.json", dst / "reports/provenance.json")
    return dst


@pytest.mark.parametrize("result", ["metrics/significance.json", "docs/cpu-long/significance.json"])
def test_editing_one_committed_summary_value_makes_the_check_fail(tmp_path, monkeypatch, result) -> None:
    root = copy_checkout(tmp_path)
    assert cog_check(root, monkeypatch)[0] == 0  # the copy is fresh as it is
    path = root / result
    doc = json.loads(path.read_text())
    summary = doc["backbones"]["all-MiniLM-L6-v2"]["losses"]["focal_infonce"]["avg"]
    summary["mean"] += 0.5
    path.write_text(json.dumps(doc))
    status, out = cog_check(root, monkeypatch)
    assert status != 0 and "Check failed" in out, out


def test_editing_a_provenance_record_makes_the_check_fail(tmp_path, monkeypatch) -> None:
    root = copy_checkout(tmp_path)
    path = root / "docs/hcl-run/provenance.json"
    record = json.loads(path.read_text())
    record["wall_seconds"] += 60
    path.write_text(json.dumps(record))
    status, out = cog_check(root, monkeypatch)
    assert status != 0 and "README.md" in out, out


def test_a_set_without_its_files_is_refused_naming_the_file(tmp_path, monkeypatch) -> None:
    from focalcse.report import docs_blocks

    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"docs/nowhere/significance\.json"):
        docs_blocks.sts_table("docs/nowhere")


def test_the_determinism_sentence_says_what_the_runs_gave(tmp_path) -> None:
    import json

    from focalcse.report.docs_blocks import determinism_sentence

    rec = {
        "item": "train@x",
        "command": "dvc repro --force -s train@x",
        "commit": "abc1234",
        "cpu": "AMD EPYC",
    }
    runs = [{"model_md5": "m1.dir", "final_loss": 0.5, "wall_s": 10}] * 3
    (tmp_path / "d.json").write_text(json.dumps({**rec, "runs": runs}))
    said = determinism_sentence("d.json", tmp_path)
    assert "trained 3 times" in said and "all 3 gave the same model folder (`m1.dir`)" in said
    runs = [*runs, {"model_md5": "m2.dir", "final_loss": 0.5, "wall_s": 10}]
    (tmp_path / "d.json").write_text(json.dumps({**rec, "runs": runs}))
    said = determinism_sentence("d.json", tmp_path)
    assert "4 times" in said and "2 distinct model folders (`m1.dir`, `m2.dir`)" in said
    assert "1 distinct final losses" in said
