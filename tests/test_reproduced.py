"""``focalcse reproduced`` on a throw-away git repository holding this checkout's committed result
files: a clean work tree passes, a value moved by a known amount is reported as that difference, a
flipped verdict and a deleted file are reported, the tolerance comes from a recorded comparison, and
README.md quotes the tolerance as the command states it."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from focalcse.cli import main
from focalcse.evidence.reproduced import load_tolerance, source_paths, tolerance_text
from focalcse.layout import Layout, companion_file

REPO = Path(__file__).resolve().parents[1]
START = "<!-- [[[cog from focalcse.evidence import docs_blocks as d; cog.outl(d.tolerance_sentence()) ]]] -->"
END = "<!-- [[[end]]] -->"


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    """A git repository whose one commit holds the result files this checkout's HEAD commits."""
    root = tmp_path / "repo"
    root.mkdir()
    wanted = [str(p) for p in source_paths(Layout()) if (REPO / p).exists()] + ["dvc.lock"]
    tar = subprocess.run(
        ["git", "archive", "--format=tar", "HEAD", "--", *wanted], cwd=REPO, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(root, filter="data")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "results")
    return root


def run(root: Path, *args: str, capsys) -> tuple[int, str, dict]:
    out = root.parent / "cmp.json"
    rc = main(["reproduced", "--root", str(root), "--json", str(out), *args])
    return rc, capsys.readouterr().out, json.loads(out.read_text()) if out.is_file() else {}


def first_eval(root: Path) -> Path:
    return sorted(p for p in Layout.at(root).eval_dir.glob("*.json") if p.name.count(".") == 1)[0]


def edit(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def test_a_clean_work_tree_reproduces_with_nothing_different(repo: Path, capsys) -> None:
    rc, out, record = run(repo, capsys=capsys)
    assert rc == 0, out
    assert out.rstrip().endswith("reproduced: every table within its tolerance, every verdict the same")
    assert all(t["max_diff"] == 0 and t["ok"] for t in record["tables"].values())
    # every task score and average of every evaluation, counted from the files themselves
    evals = [
        json.loads(p.read_text()) for p in Layout.at(repo).eval_dir.glob("*.json") if p.name.count(".") == 1
    ]
    scores = [
        k
        for d in evals
        for k, v in d.items()
        if isinstance(v, float) and k not in ("alignment", "uniformity")
    ]
    assert record["tables"]["sts_per_run"]["values"] == len(scores) + sum(len(d["wmean"]) for d in evals)
    sig = json.loads(Layout.at(repo).significance_file.read_text())
    tests = [t for e in sig["backbones"].values() for lt in e["ttest"].values() for t in lt.values()]
    assert record["tables"]["p_values"]["verdicts"] == len(tests)


def test_a_moved_score_is_its_difference_and_a_tolerance_record_decides(repo: Path, capsys) -> None:
    path = first_eval(repo)
    edit(path, lambda d: d.update(STS12=d["STS12"] + 0.0123))
    rc, out, record = run(repo, capsys=capsys)
    table = record["tables"]["sts_per_run"]
    assert rc == 1
    assert table["max_diff"] == pytest.approx(0.0123, abs=1e-9)
    assert table["max_at"] == f"{path.stem} STS12" and not table["within"]
    assert {n for n, t in record["tables"].items() if t["max_diff"]} == {"sts_per_run"}
    assert f"largest difference at {path.stem} STS12" in out and "not reproduced: sts_per_run" in out

    # the record of that comparison, as a tolerance file: the same difference now passes ...
    tolerance = Layout.at(repo).reproduction_tolerance_file
    tolerance.parent.mkdir(parents=True, exist_ok=True)
    tolerance.write_text(json.dumps(record))
    assert load_tolerance(Layout.at(repo)).of("sts_per_run") == table["max_diff"]
    rc, out, again = run(repo, capsys=capsys)
    assert rc == 0, out
    assert again["tables"]["sts_per_run"]["tolerance"] == table["max_diff"]
    assert "the largest difference measured between two runs of the default, a rerun (code" in out
    assert "note:" not in out  # measured on these results' own precision, code and CPU
    # ... and twice the move fails it
    edit(path, lambda d: d.update(STS12=d["STS12"] + 0.0123))
    rc, out, again = run(repo, capsys=capsys)
    assert rc == 1 and again["tables"]["sts_per_run"]["max_diff"] == pytest.approx(0.0246, abs=1e-9)


def test_a_tolerance_measured_on_other_code_precision_or_cpu_says_so(repo: Path, capsys) -> None:
    """The tolerance names what it was measured on; results of another precision, train / evaluate
    code or CPU kind get one plain note each instead of a silent pass."""
    _, _, record = run(repo, capsys=capsys)
    layout = Layout.at(repo)
    for side in ("compared", "against"):
        assert {"code_commits", "cpu_models", "precisions", "code"} <= set(record[side])
        assert record[side]["precisions"]  # e.g. ["eval fp32", "train fp32"] from the items' metas
    tolerance = layout.reproduction_tolerance_file
    tolerance.parent.mkdir(parents=True, exist_ok=True)
    other = json.loads(json.dumps(record))
    for side in ("compared", "against"):
        other[side] |= {
            "precisions": ["eval fp16", "train fp16"],
            "code": "0123456789ab",
            "cpu_models": ["Z80"],
        }
    tolerance.write_text(json.dumps(other))
    rc, out, _ = run(repo, capsys=capsys)
    assert rc == 0, out  # the numbers are within it; what it was measured on is said, not enforced
    notes = [line for line in out.splitlines() if line.startswith("note: ")]
    assert len(notes) == 3, out
    assert "measured on eval fp16, train fp16 results" in notes[0]
    assert "other train / evaluate code (fingerprint 0123456789ab)" in notes[1]
    assert "measured on Z80 only" in notes[2]
    # a record from before these fields: it says it cannot tell
    for side in ("compared", "against"):
        for key in ("precisions", "code"):
            other[side].pop(key)
    tolerance.write_text(json.dumps(other))
    _, out, _ = run(repo, capsys=capsys)
    assert "does not record the precision" in out and "does not record which train / evaluate code" in out


def test_a_flipped_verdict_and_a_missing_file_are_reported(repo: Path, capsys) -> None:
    layout = Layout.at(repo)
    sig = json.loads(layout.significance_file.read_text())
    entry = next(iter(sig["backbones"].values()))
    loss, tests = next(iter(entry["ttest"].items()))
    key = next(k for k, t in tests.items() if t["significant_holm"])
    before = tests[key]["p_holm"]

    def flip(doc: dict) -> None:
        test = next(iter(doc["backbones"].values()))["ttest"][loss][key]
        test.update(p_holm=0.5, significant_holm=False)

    edit(layout.significance_file, flip)
    gone = first_eval(repo)
    for p in (gone, companion_file(gone, "meta"), companion_file(gone, "subsets")):
        p.unlink(missing_ok=True)
    rc, out, record = run(repo, capsys=capsys)
    p_values = record["tables"]["p_values"]
    assert rc == 1
    assert p_values["max_diff"] == pytest.approx(0.5 - before, abs=1e-12)
    assert [(v[1], v[2]) for v in p_values["verdicts_changed"]] == [("not significant", "significant")]
    assert p_values["verdicts_changed"][0][0].endswith(f"/{loss}-{sig['baseline']} {key}")
    rel = gone.relative_to(repo).as_posix()
    assert record["tables"]["sts_per_run"]["missing"] == {"the work tree": [rel], "HEAD": []}
    assert f"missing in the work tree: {rel}" in out and "verdict changed" in out


def test_another_commit_against_another(repo: Path, capsys) -> None:
    edit(first_eval(repo), lambda d: d.update(avg=d["avg"] - 0.25))
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "rerun")
    git(repo, "checkout", "-q", "HEAD~1", "--", ".")  # the work tree back at the first commit
    rc, _, record = run(repo, "--of", "HEAD", "--against", "HEAD~1", capsys=capsys)
    assert rc == 1 and record["tables"]["sts_per_run"]["max_diff"] == pytest.approx(0.25, abs=1e-12)
    assert record["compared"]["commit"] == git(repo, "rev-parse", "HEAD").strip()
    rc, _, _ = run(repo, capsys=capsys)  # the work tree equals HEAD~1, not HEAD
    assert rc == 1


def test_a_bad_revision_or_folder_is_one_line(repo: Path, tmp_path: Path, capsys) -> None:
    assert main(["reproduced", "--root", str(repo), "--against", "no-such-rev"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"focalcse reproduced: error: revision 'no-such-rev': not a commit of {repo}"
    broken = first_eval(repo)
    broken.write_text("{")
    assert main(["reproduced", "--root", str(repo)]) == 2
    rel = broken.relative_to(repo).as_posix()
    assert capsys.readouterr().err.startswith(
        f"focalcse reproduced: error: {rel} in the work tree: not a JSON result document ("
    )
    plain = tmp_path / "plain"
    plain.mkdir()
    assert main(["reproduced", "--root", str(plain)]) == 2
    assert "not inside a git checkout" in capsys.readouterr().err


def test_readme_quotes_the_tolerance_as_the_command_states_it() -> None:
    readme = (REPO / "README.md").read_text()
    assert START in readme, f"README.md lacks the cog block {START!r}"
    block = readme.split(START, 1)[1].split(END, 1)[0].strip()
    expected = tolerance_text(load_tolerance(Layout.at(REPO)))
    assert block == expected, f"README.md's tolerance block is stale (make docs); it should read:\n{expected}"
