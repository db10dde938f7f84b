"""A model folder's bytes depend on the model only: not on HF_HUB_OFFLINE, the working directory or
where the backbone folder lay (no loader flags, absolute paths, host or user names), and every file
follows the umask like every other output."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from focalcse.atomic import current_umask

SAVE = """
import sys
from focalcse.core.model import SentenceEncoder
enc = SentenceEncoder.from_pretrained(sys.argv[1], pooler="cls", mlp_only_train=True, max_seq_len=24,
                                      mlp_init="fresh", seed=3)
enc.save(sys.argv[2], extra={"best_step": 1})
"""


def _files(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _save(backbone: Path, out: Path, cwd: Path, offline: bool) -> dict[str, tuple[bytes, int]]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    cwd.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", SAVE, str(backbone), str(out)], cwd=cwd, env=env, check=True)
    return _files(out)


@pytest.mark.slow
def test_a_saved_folder_is_byte_identical_in_any_environment(tiny_backbone: Path, tmp_path: Path) -> None:
    # the same backbone at two places (same folder name), saved from two working directories,
    # with HF_HUB_OFFLINE set and unset
    b1, b2 = tmp_path / "here" / "tiny", tmp_path / "there" / "deeper" / "tiny"
    shutil.copytree(tiny_backbone, b1)
    shutil.copytree(tiny_backbone, b2)
    offline = _save(b1, tmp_path / "out1" / "model", tmp_path / "cwd1", offline=True)
    online = _save(b2, tmp_path / "out2" / "model", tmp_path / "cwd2" / "sub", offline=False)
    assert sorted(offline) == sorted(online)
    for name in offline:
        assert offline[name][0] == online[name][0], f"{name} differs between the two environments"
    text = offline["tokenizer_config.json"][0].decode()
    assert "local_files_only" not in text and "is_local" not in text
    blob = b"".join(content for content, _ in offline.values() if len(content) < 2_000_000)
    for leak in (str(tmp_path), os.environ.get("USER", "\0"), os.uname().nodename):
        assert leak.encode() not in blob, f"{leak!r} written into a model folder"
    assert b'"backbone": "folder:tiny"' in offline["focalcse.json"][0]
    # every file, the weights included, follows the umask (safetensors writes 0600 on its own)
    want = 0o666 & ~current_umask()
    assert {name: mode for name, (_, mode) in offline.items()} == {name: want for name in offline}


def test_loader_flags_are_dropped_and_hub_ids_kept(tmp_path: Path) -> None:
    from focalcse.core.model import drop_loader_flags, portable_source

    cfg = tmp_path / "tokenizer_config.json"
    cfg.write_text(
        '{"do_lower_case": true, "is_local": true, "local_files_only": false, "model_max_length": 512}'
    )
    drop_loader_flags(cfg)
    assert cfg.read_text() == '{\n  "do_lower_case": true,\n  "model_max_length": 512\n}\n'
    assert portable_source("all-MiniLM-L6-v2") == "all-MiniLM-L6-v2"
    assert portable_source("bert-base-uncased") == "bert-base-uncased"
    assert (
        portable_source("sentence-transformers/all-MiniLM-L6-v2") == "sentence-transformers/all-MiniLM-L6-v2"
    )
    assert portable_source(str(tmp_path)) == f"folder:{tmp_path.name}"
    assert portable_source("./models/x") == "folder:x"
