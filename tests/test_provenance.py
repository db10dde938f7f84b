"""Provenance: 'dirty' means uncommitted code or params, not pipeline outputs; the CPU kind is recorded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from focalcse.provenance import cpu_info, git_commit, hardware


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def test_dirty_means_code_or_params_not_pipeline_outputs(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "metrics").mkdir(parents=True)
    (repo / "reports").mkdir()
    (repo / "sets/long/metrics").mkdir(parents=True)
    (repo / "models/b").mkdir(parents=True)
    for name in ("params.yaml", "dvc.lock", "metrics/m.json", "reports/report.md", "code.py"):
        (repo / name).write_text("0\n")
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x")
    clean = git_commit(repo)
    assert len(clean) == 40 and not clean.endswith("-dirty")
    for output in ("dvc.lock", "metrics/m.json", "reports/report.md"):  # what `dvc repro` rewrites
        (repo / output).write_text("1\n")
    assert git_commit(repo) == clean
    assert git_commit(repo / "metrics") == clean  # from a subfolder too
    # a parameter set's own folder, and the .gitignore files DVC writes and stages (git add), as a
    # set's run leaves them: still the same code
    for output in (
        "sets/long/dvc.lock",
        "sets/long/params.yaml",
        "sets/long/metrics/m.json",
        "models/b/.gitignore",
    ):
        (repo / output).write_text("/seed1\n")
    _git(repo, "add", "sets", "models/b/.gitignore")
    assert git_commit(repo) == clean
    assert git_commit(repo / "sets/long") == clean
    (repo / "params.yaml").write_text("1\n")
    assert git_commit(repo) == clean + "-dirty"
    _git(repo, "checkout", "-q", "params.yaml")
    (repo / "code.py").write_text("1\n")
    assert git_commit(repo) == clean + "-dirty"


def test_cpu_model_and_matmul_flags_are_read(tmp_path: Path) -> None:
    fake = tmp_path / "cpuinfo"
    fake.write_text(
        "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
        "flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile amx_bf16 amx_int8\n\n"
        "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: fpu\n"
    )
    info = cpu_info(fake)
    assert info == {
        "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
        "cpu_flags": ["avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"],
    }
    assert cpu_info(tmp_path / "missing")["cpu_flags"] == []


def test_hardware_names_the_kernels_that_decide_the_last_bits() -> None:
    import torch

    hw = hardware()
    assert hw["device"] == ("cpu" if not torch.cuda.is_available() else hw["device"])
    assert hw["torch_build"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert hw["torch_build"]["onednn"] is None or hw["torch_build"]["onednn"][0].isdigit()
    assert isinstance(hw["cpu_model"], str) and hw["cpu_model"]


def test_a_step_without_torch_records_that_and_does_not_import_it() -> None:
    code = (
        "import json, sys; from focalcse.provenance import hardware; hw = hardware(); "
        "print(json.dumps([hw, 'torch' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    hw, imported = json.loads(out)
    assert imported is False and hw["torch_used"] is False and "torch_threads" not in hw
    assert hw["cpu_model"] and hw["cpu_count"] >= 1


def test_prepared_sts_does_not_depend_on_where_the_mirror_lies(
    tmp_path: Path, monkeypatch, data_mirror: Path
) -> None:
    import shutil

    from focalcse.config import load_params
    from focalcse.layout import Layout
    from focalcse.steps import prepare_sts

    mirror = data_mirror  # skips, as every mirror test, when there is none
    monkeypatch.delenv("FOCALCSE_DATA_MIRROR", raising=False)
    params = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
    outputs = []
    for name in ("here", "moved/elsewhere"):
        copy = tmp_path / name / "mirror"
        shutil.copytree(mirror / "senteval", copy / "senteval")
        layout = Layout.at(tmp_path / name / "repo")
        prepare_sts.run(params.with_changes(data=type(params.data)(mirror=str(copy))), layout)
        outputs.append({p.name: p.read_bytes() for p in sorted(layout.sts_dir.iterdir())})
        assert str(tmp_path) not in outputs[-1]["manifest.json"].decode()
    assert outputs[0] == outputs[1]  # byte-identical folder, so the same DVC hash
