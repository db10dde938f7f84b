"""Data sources offline without a mirror: a failed download is one clear error naming the URL and the fix."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from focalcse.data import sources
from focalcse.data.corpus import CorpusError
from focalcse.data.sts import StsDataError

REPO = Path(__file__).resolve().parents[1]
UNREACHABLE = "http://127.0.0.1:9/wiki1m_for_simcse.txt"  # loopback port 9 (discard): refused at once


@pytest.fixture
def no_mirror(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.delenv(sources.MIRROR_ENV, raising=False)
    for name in sources.OFFLINE_ENVS:  # the downloads are tried (each test sets what it needs)
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(sources.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_corpus_download_failure_names_url_and_mirror(no_mirror: Path, monkeypatch) -> None:
    monkeypatch.setattr(sources, "WIKI1M_URL", UNREACHABLE)
    with pytest.raises(CorpusError) as err:
        sources.corpus_path(None)
    msg = str(err.value)
    assert (
        UNREACHABLE in msg and "FOCALCSE_DATA_MIRROR" in msg and "data.mirror" in msg and "shared/data" in msg
    )
    assert "\n" not in msg
    assert not any(no_mirror.iterdir())  # no partial download left behind


def test_senteval_download_failure_names_url_and_mirror(no_mirror: Path, monkeypatch) -> None:
    url = "http://127.0.0.1:9/senteval.tar"
    monkeypatch.setattr(sources, "SENTEVAL_URL", url)
    with pytest.raises(
        StsDataError, match=r"cannot download http://127\.0\.0\.1:9/senteval\.tar .*FOCALCSE_DATA_MIRROR"
    ):
        sources.senteval_dir(None)
    assert not (no_mirror / "senteval").exists() and not (no_mirror / "senteval.tar").exists()


def test_hub_offline_error_is_a_download_error(no_mirror: Path, monkeypatch) -> None:
    from huggingface_hub.errors import OfflineModeIsEnabled

    def offline(*args, **kwargs):
        raise OfflineModeIsEnabled("offline mode is enabled")

    monkeypatch.setattr(sources.urllib.request, "urlopen", offline)
    with pytest.raises(
        CorpusError, match=r"cannot download .*wiki1m_for_simcse\.txt .*offline mode is enabled"
    ):
        sources.corpus_path(None)


@pytest.mark.parametrize("env", sources.OFFLINE_ENVS)
def test_offline_env_refuses_at_once_without_a_network_lookup(no_mirror: Path, monkeypatch, env: str) -> None:
    import socket

    tried: list[object] = []

    def lookup(*args, **kwargs):
        tried.append(args)
        raise OSError("no network in this test")

    for name in ("getaddrinfo", "create_connection"):
        monkeypatch.setattr(socket, name, lookup)
    monkeypatch.setenv(env, "1")
    with pytest.raises(CorpusError) as err:
        sources.corpus_path(None)
    msg = str(err.value)
    assert msg.startswith(f"cannot download {sources.WIKI1M_URL} (offline: {env}=1)") and "\n" not in msg
    assert "FOCALCSE_DATA_MIRROR" in msg and "data.mirror" in msg
    with pytest.raises(StsDataError, match=rf"cannot download {sources.SENTEVAL_URL} \(offline: {env}=1\)"):
        sources.senteval_dir(None)
    assert tried == [] and not (no_mirror / "senteval.tar").exists()
    monkeypatch.setenv(env, "0")  # off: the download is tried
    with pytest.raises(CorpusError, match="no network in this test"):
        sources.corpus_path(None)
    assert tried


def test_offline_env_leaves_local_urls_alone(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    src = tmp_path / "src.txt"
    src.write_text("a line\n")
    assert sources._download(src.as_uri(), tmp_path / "cache" / "c.txt").read_text() == "a line\n"


def test_download_permissions_follow_umask(tmp_path: Path) -> None:
    src = tmp_path / "src.txt"
    src.write_text("a line\n")
    old = os.umask(0o022)
    try:
        dest = sources._download(src.as_uri(), tmp_path / "cache" / "c.txt")
    finally:
        os.umask(old)
    assert dest.read_text() == "a line\n" and (dest.stat().st_mode & 0o777) == 0o644


WRAPPER = textwrap.dedent(
    """
    import runpy, sys
    sys.path.insert(0, sys.argv[1])  # stages/, for `_common`
    from focalcse.data import sources
    sources.WIKI1M_URL = sources.SENTEVAL_URL = sys.argv[3]
    sys.argv = [sys.argv[2]]
    runpy.run_path(sys.argv[0], run_name="__main__")
    """
)


@pytest.mark.parametrize("stage", ["sample", "prepare_sts"])
def test_stage_offline_without_mirror_prints_one_line(tmp_path: Path, stage: str) -> None:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"]["mirror"] = ""
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    (tmp_path / "wrap.py").write_text(WRAPPER)
    env = {k: v for k, v in os.environ.items() if k not in (sources.MIRROR_ENV, *sources.OFFLINE_ENVS)}
    env[sources.CACHE_ENV] = str(tmp_path / "cache")
    url = f"http://127.0.0.1:9/{stage}"
    proc = subprocess.run(
        [sys.executable, "wrap.py", str(REPO / "stages"), str(REPO / "stages" / f"{stage}.py"), url],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: cannot download {url} ") and "FOCALCSE_DATA_MIRROR" in lines[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "data").exists()
