"""Parameter sets are overlays on params.yaml (focalcse.paramsets): the merge rule, what the sets
hold, and ``focalcse params use`` (what it writes, in the set's own folder ``sets/<name>/``, that it
says so, that it never stacks two sets and writes nothing for a bad set)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from focalcse.config import ConfigError, load_params
from focalcse.paramsets import (
    EXTENDS,
    HEADER,
    available,
    chain,
    compose,
    compose_set,
    load_set,
    set_dir,
    use,
)

REPO = Path(__file__).resolve().parents[1]


def _checkout(tmp_path: Path, *sets: str) -> Path:
    """A folder holding this repo's params.yaml and the named sets under params/."""
    root = tmp_path / "repo"
    (root / "params").mkdir(parents=True)
    shutil.copy(REPO / "params.yaml", root / "params.yaml")
    for name in sets:
        shutil.copy(REPO / "params" / f"{name}.yaml", root / "params" / f"{name}.yaml")
    return root


def test_mappings_merge_and_everything_else_replaces() -> None:
    base = {"a": {"x": 1, "y": {"p": 1, "q": 2}}, "l": [1, 2], "s": "keep", "e": {}}
    over = {"a": {"y": {"q": 3}, "z": 4}, "l": [], "e": {"k": {"v": 1}}, "new": 5}
    got = compose(base, over)
    assert got == {
        "a": {"x": 1, "y": {"p": 1, "q": 3}, "z": 4},
        "l": [],
        "s": "keep",
        "e": {"k": {"v": 1}},
        "new": 5,
    }
    assert base["a"]["y"] == {"p": 1, "q": 2} and base["e"] == {}  # the inputs are not changed
    over["e"]["k"]["v"] = 9
    assert got["e"]["k"]["v"] == 1  # nor shared with the result


@pytest.mark.parametrize("name", available(REPO))
def test_every_set_holds_only_what_differs_and_validates(name: str) -> None:
    """An overlay key equal to its base's value (the set it extends, or the default) would hide a
    later change of that base."""
    over = yaml.safe_load((REPO / "params" / f"{name}.yaml").read_text())
    parent = over.pop(EXTENDS, None)
    base = compose_set(REPO, parent) if parent else yaml.safe_load((REPO / "params.yaml").read_text())

    def same(b: object, o: object, where: str) -> list[str]:
        if isinstance(o, dict) and isinstance(b, dict):
            return [w for k, v in o.items() for w in (same(b.get(k), v, f"{where}.{k}") if k in b else [])]
        return [where] if b == o else []

    assert same(base, over, name) == []
    params = load_set(REPO, name)
    assert params.raw["tracking"]["experiment"] == name  # each set names its MLflow experiment


def test_use_writes_the_composed_set_in_its_own_folder(tmp_path: Path) -> None:
    root = _checkout(tmp_path, "hcl", "frameworks")
    default = (root / "params.yaml").read_bytes()
    line = use(root, "hcl")
    assert line.startswith("sets/hcl/params.yaml <- ") and "params/hcl.yaml" in line
    assert set_dir(root, "hcl") == root / "sets" / "hcl"
    text = (root / "sets/hcl/params.yaml").read_text()
    assert text.startswith(HEADER) and "params/hcl.yaml" in text.splitlines()[0]
    written = load_params(root / "sets/hcl/params.yaml")
    assert written.sweep.losses == ("infonce", "focal_infonce", "hcl")
    assert written.raw == load_set(REPO, "hcl").raw
    assert (root / "params.yaml").read_bytes() == default  # the default's params stay as they are


def test_use_stacks_nothing(tmp_path: Path) -> None:
    root = _checkout(tmp_path, "hcl", "frameworks")
    use(root, "hcl")
    hcl = (root / "sets/hcl/params.yaml").read_bytes()
    use(root, "frameworks")  # composed over the default params.yaml, so no hcl loss carried over
    p = load_params(root / "sets/frameworks/params.yaml")
    assert p.sweep.losses == ("infonce", "focal_infonce") and p.sweep.frameworks == (
        "simcse",
        "promptbert",
        "diffcse",
    )
    assert p.raw == compose_set(REPO, "frameworks")
    assert (root / "sets/hcl/params.yaml").read_bytes() == hcl  # one set's folder is not another's


def test_a_bad_set_writes_nothing(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    (root / "params" / "bad.yaml").write_text("train: {batch_size: -1}\n")
    before = (root / "params.yaml").read_text()
    with pytest.raises(ConfigError, match="batch_size"):
        use(root, "bad")
    with pytest.raises(ConfigError, match="no params/nope.yaml; available: bad"):
        use(root, "nope")
    assert (root / "params.yaml").read_text() == before and not (root / "sets").exists()


def test_cli_use_and_config_read_overlays(tmp_path: Path) -> None:
    root = _checkout(tmp_path, "paper")
    cli = [sys.executable, "-m", "focalcse.cli"]
    shown = subprocess.run(
        [*cli, "config", "--params", str(root / "params/paper.yaml"), "--backbone", "bert-base-uncased"]
        + ["--loss", "focal_infonce"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert '"temperature": 0.07' in shown.stdout and '"batch_size": 64' in shown.stdout
    done = subprocess.run(
        [*cli, "params", "use", "paper", "--root", str(root)], capture_output=True, text=True
    )
    assert done.returncode == 0 and "sets/paper/params.yaml" in done.stdout, done.stderr
    # the set's own dvc.yaml runs the checkout's stage scripts from its folder, two levels down
    rendered = yaml.safe_load((root / "sets/paper/dvc.yaml").read_text())
    assert rendered["stages"]["check"]["cmd"] == "python ../../stages/check.py"
    assert rendered["stages"]["train"]["deps"][0] == "../../stages/train.py"
    bad = subprocess.run([*cli, "params", "use", "nope", "--root", str(root)], capture_output=True, text=True)
    assert bad.returncode == 2 and "no params/nope.yaml" in bad.stderr


def _write_set(root: Path, name: str, body: dict) -> None:
    (root / "params" / f"{name}.yaml").write_text(yaml.safe_dump(body), encoding="utf-8")


def test_an_overlay_extends_an_overlay_base_first(tmp_path: Path) -> None:
    """a <- b <- c: each link merged over the one it names, the default at the bottom; the extends
    keys themselves never reach the composed mapping."""
    root = _checkout(tmp_path)
    _write_set(root, "a", {"train": {"max_steps": 7, "lr": 1.0e-4}, "tracking": {"experiment": "a"}})
    _write_set(root, "b", {EXTENDS: "a", "train": {"max_steps": 9}, "sweep": {"seeds": [1, 4]}})
    _write_set(root, "c", {EXTENDS: "b", "sweep": {"seeds": [1, 6]}, "tracking": {"experiment": "c"}})
    assert chain(root, "c") == ["a", "b", "c"]
    default = yaml.safe_load((root / "params.yaml").read_text())
    got = compose_set(root, "c")
    assert EXTENDS not in got
    assert got["train"]["max_steps"] == 9 and got["train"]["lr"] == 1.0e-4  # b over a
    assert got["train"]["temperature"] == default["train"]["temperature"]  # the default beneath
    assert got["sweep"]["seeds"] == [1, 6] and got["sweep"]["losses"] == default["sweep"]["losses"]
    assert got["tracking"]["experiment"] == "c"
    message = use(root, "c")
    assert "params/a.yaml + params/b.yaml + params/c.yaml" in message
    text = (root / "sets/c/params.yaml").read_text()
    assert text.startswith(HEADER) and "params/a.yaml, then params/b.yaml, then params/c.yaml" in text
    assert load_params(root / "sets/c/params.yaml").train.max_steps == 9


def test_paper_tau005_is_paper_with_tau_005(tmp_path: Path) -> None:
    """The set that extends paper differs from it in Focal-InfoNCE's BERT tau, the tau ablation's
    points and the experiment name only (checked key by key against paper's composed mapping)."""
    paper, other = compose_set(REPO, "paper"), compose_set(REPO, "paper-tau005")
    for backbone in ("bert-base-uncased", "bert-large-uncased"):
        assert paper["backbone_overrides"][backbone]["losses"]["focal_infonce"]["temperature"] == 0.07
        assert other["backbone_overrides"][backbone]["losses"]["focal_infonce"]["temperature"] == 0.05
        other["backbone_overrides"][backbone]["losses"] = paper["backbone_overrides"][backbone]["losses"]
    assert other["ablation"]["temperatures"] == [0.03, 0.07, 0.1]
    assert other["tracking"]["experiment"] == "paper-tau005"
    other["ablation"]["temperatures"], other["tracking"] = (
        paper["ablation"]["temperatures"],
        paper["tracking"],
    )
    assert other == paper
    p = load_set(REPO, "paper-tau005")
    for backbone in p.sweep.backbones:
        for loss in p.sweep.losses:
            assert p.effective_config(backbone, loss, 1, "simcse")["temperature"] == 0.05


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        ({"x": {EXTENDS: "y"}, "y": {EXTENDS: "x"}}, "extends forms a loop (x -> y -> x)"),
        ({"x": {EXTENDS: "x"}}, "extends forms a loop (x -> x)"),
        ({"x": {EXTENDS: "nope"}}, "parameter set 'nope': no params/nope.yaml"),
        ({"x": {EXTENDS: ["y"]}}, "extends: ['y']: expected the name of a set in params/"),
    ],
)
def test_a_bad_extends_is_one_line_and_writes_nothing(tmp_path: Path, sets: dict, needle: str) -> None:
    root = _checkout(tmp_path)
    for name, body in sets.items():
        _write_set(root, name, body)
    before = (root / "params.yaml").read_bytes()
    with pytest.raises(ConfigError) as err:
        use(root, "x")
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert (root / "params.yaml").read_bytes() == before and not (root / "sets").exists()


@pytest.mark.parametrize("name", ["../../etc/evil", "org/evil", "/opt/models/mine"])
def test_a_backbone_named_like_a_path_is_refused_before_dvc_reads_it(
    tmp_path: Path, capsys, name: str
) -> None:
    """DVC's own parse of dvc.yaml would refuse ``../../etc/evil`` first, with advice that does not
    apply (``Use `dvc remove train@../../etc/evil-infonce-1```); ``params use``, ``params check``
    (which ``make reproduce`` runs first) and the flows (tests/test_orchestration.py) refuse it with
    the check stage's line."""
    from focalcse.cli import main

    root = _checkout(tmp_path)
    (root / "params" / "evil.yaml").write_text(yaml.safe_dump({"sweep": {"backbones": [name]}}))
    before = (root / "params.yaml").read_text()
    line = (
        f"params sweep.backbones = {name!r}: expected names of letters, digits, '.', '_' or '-' "
        "(set backbone_overrides.<name>.source for a path or org/id)"
    )
    assert main(["params", "use", "evil", "--root", str(root)]) == 2
    assert capsys.readouterr().err == f"focalcse params: error: {line}\n"
    assert (root / "params.yaml").read_text() == before  # nothing written
    assert main(["params", "check", "--params", str(root / "params" / "evil.yaml")]) == 2
    assert capsys.readouterr().err == f"focalcse params: error: {line}\n"
    (root / "params.yaml").write_text(before.replace("backbones: [all-MiniLM-L6-v2]", f"backbones: [{name}]"))
    assert main(["params", "check", "--params", str(root / "params.yaml")]) == 2
    assert capsys.readouterr().err == f"focalcse params: error: {line}\n"


def test_params_check_passes_a_valid_set(tmp_path: Path, capsys) -> None:
    from focalcse.cli import main

    root = _checkout(tmp_path, "paper")
    for path in (root / "params.yaml", root / "params" / "paper.yaml"):
        assert main(["params", "check", "--params", str(path)]) == 0
        assert capsys.readouterr().out == f"{path}: valid\n"
