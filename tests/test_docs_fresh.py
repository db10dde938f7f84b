"""The numbers of README.md and docs/*.md are rendered from the committed result files (cog blocks
calling :mod:`focalcse.evidence.docs_blocks`): the committed text must be what ``make docs`` writes, and
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
    """The documents, params, code and committed result and benchmark files, without the rest of the
    checkout (models, data, the venv)."""
    for name in ("README.md", "params.yaml", "dvc.lock"):
        shutil.copy2(ROOT / name, dst / name)
    for folder in ("docs", "metrics", "params"):
        shutil.copytree(ROOT / folder, dst / folder)
    # the code files the sets' dvc.lock files record (checkout_code_sentence compares their md5s)
    for folder in ("src", "stages"):
        shutil.copytree(
            ROOT / folder, dst / folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
        )
    # each set's own folder (its params, dvc.yaml / dvc.lock, metrics, reports), without what a run
    # left beside them in this checkout (models, the corpus, its MLflow store)
    shutil.copytree(
        ROOT / "sets",
        dst / "sets",
        ignore=shutil.ignore_patterns("models", "data", "mlflow.db", "mlartifacts"),
    )
    # docs/performance.md renders the committed benchmark files
    shutil.copytree(
        ROOT / "benchmarks", dst / "benchmarks", ignore=shutil.ignore_patterns("*.py", "__pycache__", "*.sh")
    )
    (dst / "reports").mkdir()
    shutil.copy2(ROOT / "reports/provenance.json", dst / "reports/provenance.json")
    return dst


@pytest.mark.parametrize("result", ["metrics/significance.json", "sets/cpu-long/metrics/significance.json"])
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
    path = root / "sets/hcl/reports/provenance.json"
    record = json.loads(path.read_text())
    record["wall_seconds"] += 60
    path.write_text(json.dumps(record))
    status, out = cog_check(root, monkeypatch)
    assert status != 0 and "README.md" in out, out


def test_a_set_without_its_files_is_refused_naming_the_file(tmp_path, monkeypatch) -> None:
    from focalcse.evidence import docs_blocks

    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"docs/nowhere/significance\.json"):
        docs_blocks.sts_table("docs/nowhere")


def test_the_determinism_sentence_says_what_the_runs_gave(tmp_path) -> None:
    import json

    from focalcse.evidence.docs_blocks import determinism_sentence

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
    # against the committed dvc.lock's md5 of the item
    (tmp_path / "d.json").write_text(json.dumps({**rec, "runs": runs[:3], "committed_md5": "m1.dir"}))
    assert "the committed dvc.lock holds the same model md5" in determinism_sentence("d.json", tmp_path)
    (tmp_path / "d.json").write_text(json.dumps({**rec, "runs": runs[:3], "committed_md5": "m0.dir"}))
    assert "the committed dvc.lock holds `m0.dir`" in determinism_sentence("d.json", tmp_path)


def _set_folder(root: Path, name: str, code: dict[str, str], cpu: str, commit: str) -> None:
    """A set folder as `focalcse params use` lays it out, with a dvc.lock whose train/evaluate items
    depend on ``code`` (path -> md5, as the set folder spells the paths) and a provenance record."""
    import yaml

    folder = root / "sets" / name
    (folder / "reports").mkdir(parents=True)
    (folder / "dvc.yaml").write_text("stages: {}\n")
    deps = [{"path": f"../../{p}", "md5": m, "size": 1} for p, m in code.items()]
    lock = {
        "schema": "2.0",
        "stages": {
            "train@simcse-b-infonce-1": {
                "cmd": "x",
                "deps": [*deps, {"path": "data/corpus/train.txt", "md5": "d"}],
            },
            "evaluate@simcse-b-infonce-1": {"cmd": "x", "deps": deps[:1]},
            "report": {"cmd": "x", "deps": [{"path": "../../src/focalcse/report/tables.py", "md5": name}]},
        },
    }
    (folder / "dvc.lock").write_text(yaml.safe_dump(lock))
    record = {"commit": commit, "cpu_model": cpu, "cpu_flags": ["avx512_bf16"]}
    (folder / "reports/provenance.json").write_text(json.dumps(record))


def test_the_code_sentence_compares_the_code_the_items_ran(tmp_path, monkeypatch) -> None:
    from focalcse.evidence.docs_blocks import code_md5s, code_sentence

    monkeypatch.chdir(tmp_path)
    code = {"src/focalcse/core/training.py": "a1", "stages/train.py": "b1"}
    _set_folder(tmp_path, "one", code, "Xeon", "1111111aaa")
    _set_folder(tmp_path, "two", code, "Xeon", "2222222bbb")
    # the report's code is no train/evaluate dependency; the data dep is no code
    assert code_md5s("sets/one") == code
    said = code_sentence("sets/one", "sets/two")
    assert "ran the same code: all 2 code files" in said and "`sets/two` at `2222222`" in said, said
    assert "on the same CPU kind (Xeon" in said, said
    _set_folder(tmp_path, "three", {**code, "stages/train.py": "b2"}, "EPYC", "3333333ccc")
    said = code_sentence("sets/one", "sets/three")
    assert "ran different code: 1 of 2 shared code files differ" in said and "`stages/train.py`" in said, said
    assert "CPU Xeon against EPYC" in said, said
    (tmp_path / "docs/copy").mkdir(parents=True)
    (tmp_path / "docs/copy/significance.json").write_text("{}")
    (tmp_path / "docs/copy/provenance.json").write_text(json.dumps({"commit": "4444444"}))
    assert "is not recorded" in code_sentence("sets/one", "docs/copy")


def test_the_timing_table_reads_each_items_own_files(tmp_path, monkeypatch) -> None:
    import yaml

    from focalcse.evidence.docs_blocks import timing_table

    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "sets/one"
    for sub in ("metrics/train", "metrics/eval", "reports"):
        (folder / sub).mkdir(parents=True)
    (folder / "dvc.yaml").write_text("stages: {}\n")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["sweep"].update(losses=["infonce"], seeds=[1, 2])
    params["ablation"].update(loss="infonce", temperatures=[], ms=[])
    (folder / "params.yaml").write_text(yaml.safe_dump(params))
    (folder / "metrics/significance.json").write_text("{}")
    (folder / "reports/provenance.json").write_text(json.dumps({"wall_seconds": 125.0}))
    for seed, (secs, rate, mb, ev) in enumerate([(70.2, 117.0, 2048, 20.0), (90.0, 91.0, 2560, 24.4)], 1):
        stem = f"simcse-all-MiniLM-L6-v2-infonce-seed{seed}"
        train = {"steps": 128, "train_seconds": secs, "sentences_per_second": rate, "peak_memory_mb": mb}
        (folder / f"metrics/train/{stem}.json").write_text(json.dumps(train))
        (folder / f"metrics/train/{stem}.meta.json").write_text("{}")
        (folder / f"metrics/eval/{stem}.json").write_text(json.dumps({"avg": 70.0}))
        (folder / f"metrics/eval/{stem}.meta.json").write_text(
            json.dumps({"framework": "simcse", "wall_time_s": ev})
        )
    table = timing_table(["sets/one"])
    row = table.splitlines()[2]
    assert (
        row == "| `sets/one` | 0:02:05 (125 s) | SimCSE | 2 × 128 steps | 70–90 | 91–117 | 2.0–2.5 | 20–24 |"
    ), table


def _lock_with_models(folder: Path, models: dict[str, str]) -> None:
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dvc.yaml").write_text("stages: {}\n")
    stages = {
        f"train@simcse-b-infonce-{k}": {
            "cmd": "x",
            "outs": [{"path": f"models/simcse/b/infonce/seed{k}", "md5": m}],
        }
        for k, m in models.items()
    }
    (folder / "metrics/eval").mkdir(parents=True, exist_ok=True)
    for k in models:  # each item's evaluation file, its score the seed
        out = f"metrics/eval/simcse-b-infonce-seed{k}.json"
        stages[f"evaluate@simcse-b-infonce-{k}"] = {"cmd": "x", "outs": [{"path": out, "md5": "e"}]}
        (folder / out).write_text(json.dumps({"avg": float(k)}))
    stages["report"] = {"cmd": "x", "outs": [{"path": "reports/report.md", "md5": "r"}]}
    (folder / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": stages}))


def test_the_shared_items_sentence_compares_model_md5s(tmp_path, monkeypatch) -> None:
    from focalcse.evidence.docs_blocks import model_md5s, shared_items_sentence

    monkeypatch.chdir(tmp_path)
    _lock_with_models(tmp_path / "sets/one", {"1": "a.dir", "2": "b.dir", "3": "c.dir"})
    _lock_with_models(tmp_path / "sets/two", {"1": "a.dir", "2": "b.dir", "3": "c.dir", "4": "d.dir"})
    assert model_md5s("sets/one") == {
        f"train@simcse-b-infonce-{k}": m for k, m in zip("123", ("a.dir", "b.dir", "c.dir"))
    }
    said = shared_items_sentence("sets/one", "sets/two")
    assert said.startswith(
        "The 3 train items that `sets/one` and `sets/two` both hold have the same model md5"
    ), said
    assert "every field of their evaluation files is equal" in said, said
    (tmp_path / "sets/two/metrics/eval/simcse-b-infonce-seed3.json").write_text(json.dumps({"avg": 9.0}))
    assert "yet 1 of their evaluation files differ" in shared_items_sentence("sets/one", "sets/two")
    (tmp_path / "sets/two/metrics/eval/simcse-b-infonce-seed3.json").unlink()
    assert "not in both sets" in shared_items_sentence("sets/one", "sets/two")
    _lock_with_models(tmp_path / "sets/three", {"1": "a.dir", "2": "x.dir"})
    said = shared_items_sentence("sets/one", "sets/three")
    assert "1 have another model md5" in said and "`train@simcse-b-infonce-2`" in said, said


def test_the_checkout_code_sentence_names_each_code_file_that_moved(tmp_path, monkeypatch) -> None:
    """Against the md5s the sets' dvc.lock files record: equal files say so; an edited one is named."""
    import hashlib
    from types import SimpleNamespace

    from focalcse.evidence import docs_blocks

    (tmp_path / "src").mkdir()
    (tmp_path / "src/a.py").write_text("a = 1\n")
    (tmp_path / "src/b.py").write_text("b = 1\n")
    md5 = {p: hashlib.md5((tmp_path / p).read_bytes()).hexdigest() for p in ("src/a.py", "src/b.py")}
    locks = {"one": {**md5, "src/pkg": "0" * 32 + ".dir"}, "two": {"src/a.py": md5["src/a.py"]}}
    monkeypatch.setattr(docs_blocks, "code_md5s", lambda name, stages=None: locks[name])
    monkeypatch.setattr(
        docs_blocks,
        "result_set",
        lambda name, root=None: SimpleNamespace(layout=SimpleNamespace(root=tmp_path)),
    )
    same = docs_blocks.checkout_code_sentence(["one", "two"])
    assert "is the code that produced every committed set" in same and "all 2 code files" in same
    (tmp_path / "src/b.py").write_text("b = 2\n")
    moved = docs_blocks.checkout_code_sentence(["one", "two"])
    assert "is not the code that produced** `one` (1 of its code files differ here: `src/b.py`)" in moved
    assert "`two` ran this checkout's" in moved  # it records a.py only
    locks["two"] = {"src/a.py": "f" * 32}  # one set recorded another content: not this checkout's either
    (tmp_path / "src/b.py").write_text("b = 1\n")
    assert "`two` (1 of its code files differ here: `src/a.py`)" in docs_blocks.checkout_code_sentence(
        ["one", "two"]
    )


def test_the_rerun_sentence_counts_failed_tables_and_changed_verdicts(tmp_path) -> None:
    from focalcse.evidence.docs_blocks import rerun_sentence

    def table(diff, tol, verdicts=0, changed=()):
        return {
            "max_diff": diff,
            "tolerance": tol,
            "ok": diff <= tol and not changed,
            "verdicts": verdicts,
            "verdicts_changed": [list(c) for c in changed],
        }

    rec = {
        "compared": {"name": "aaa", "code_commits": ["1234567abc"]},
        "against": {"name": "bbb", "code_commits": ["7654321abc"]},
        "tables": {
            "sts": table(0.5, 0.03),
            "p": table(0.01, 0.02, 4, [("x", "a", "b")]),
            "h": table(0.0, 0.1, 2),
        },
    }
    (tmp_path / "r.json").write_text(json.dumps(rec))
    text = rerun_sentence(tmp_path / "r.json")
    assert "(code `1234567` against `7654321`): 2 of 3 tables outside the tolerance" in text
    assert "sts 0.5 (tolerance 0.03)" in text and "1 of the 6 verdicts compared changed" in text


def test_a_dvc_lock_is_parsed_once_and_again_after_an_edit(tmp_path) -> None:
    from focalcse.lockfile import lock_stages

    lock = tmp_path / "dvc.lock"
    lock.write_text("schema: '2.0'\nstages:\n  train@a:\n    cmd: python x.py\n")
    first = lock_stages(lock)
    assert first == {"train@a": {"cmd": "python x.py"}}
    assert lock_stages(lock) is first  # the second block that reads it gets the same parse
    lock.write_text("schema: '2.0'\nstages:\n  train@b:\n    cmd: python yy.py\n")
    assert lock_stages(lock) == {"train@b": {"cmd": "python yy.py"}}
    assert lock_stages(tmp_path / "absent.lock") is None
