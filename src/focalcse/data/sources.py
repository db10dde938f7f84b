"""Where the corpus and the STS data come from: the standard downloads, or a local mirror.

Defaults are the sources SimCSE uses: ``wiki1m_for_simcse.txt`` and SentEval's STS archive
(``senteval.tar``), downloaded once into a cache folder. One setting replaces every download with a
mirror folder laid out like ``shared/data``::

    <mirror>/corpus/wiki1m_standin.txt.gz   (or corpus/wiki1m_for_simcse.txt[.gz])
    <mirror>/senteval/downstream/{STS,SICK}/...

The mirror is named by the environment variable ``FOCALCSE_DATA_MIRROR`` or the ``data.mirror`` param
(the environment variable wins, so CI and offline machines need no params edit).
"""

from __future__ import annotations

import http.client
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from focalcse.atomic import current_umask
from focalcse.data.corpus import CorpusError
from focalcse.data.sts import StsDataError

MIRROR_ENV = "FOCALCSE_DATA_MIRROR"
CACHE_ENV = "FOCALCSE_CACHE"
WIKI1M_URL = (
    "https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/wiki1m_for_simcse.txt"
)
SENTEVAL_URL = "https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/senteval.tar"
MIRROR_CORPUS_NAMES = (
    "wiki1m_for_simcse.txt",
    "wiki1m_for_simcse.txt.gz",
    "wiki1m_standin.txt.gz",
    "wiki1m_standin.txt",
)


def mirror_dir(param: str | None = None) -> Path | None:
    """The configured mirror folder (env var first, then the param), checked to exist, or None."""
    value = os.environ.get(MIRROR_ENV) or param
    if not value:
        return None
    path = Path(value).expanduser().resolve()
    if not path.is_dir():
        source = MIRROR_ENV if os.environ.get(MIRROR_ENV) else "data.mirror"
        where = "" if Path(value).expanduser().is_absolute() else f", read relative to {Path.cwd()}"
        raise FileNotFoundError(f"{source}={value!r}: mirror folder {path} does not exist{where}")
    return path


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "focalcse")).expanduser()


# What a failed download raises: urllib's URLError / HTTPError (refused, unknown host, 404, ...), a
# connection dropped or timed out mid-read, a broken HTTP response; huggingface_hub's offline-mode
# error is a ConnectionError too. A local write error (disk full) is not among them and stays as is.
DOWNLOAD_ERRORS = (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError)
# Hugging Face's offline switches (the downloads are from huggingface.co): either one set, no
# network lookup is tried. The values huggingface_hub reads as true.
OFFLINE_ENVS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
_TRUE = ("1", "on", "yes", "true")


def offline_env() -> str | None:
    """``NAME=value`` of the first offline switch that is set, or None."""
    for name in OFFLINE_ENVS:
        value = os.environ.get(name, "")
        if value.strip().lower() in _TRUE:
            return f"{name}={value}"
    return None


def _download(url: str, dest: Path, error: type[Exception] = CorpusError) -> Path:
    """Download ``url`` to ``dest`` atomically (a partial download never lands at ``dest``).

    Raises:
        ``error`` (:class:`CorpusError` or :class:`StsDataError`, printed in one line by the stages):
            the download failed (refused, HTTP error), or was not tried: an http(s) URL while
            ``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE`` is set; the message names the URL and the
            mirror settings that avoid it.
    """
    from tqdm.auto import tqdm

    def failed(reason: object) -> Exception:
        return error(
            f"cannot download {url} ({reason}); offline or no network? Set {MIRROR_ENV} or the "
            f"`data.mirror` param to a mirror folder laid out like shared/data "
            f"(corpus/wiki1m_standin.txt.gz, senteval/downstream/{{STS,SICK}})"
        )

    offline = offline_env()
    if offline and urllib.parse.urlsplit(url).scheme in ("http", "https"):  # not even a DNS lookup
        raise failed(f"offline: {offline}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    try:
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as resp:
                total = int(resp.headers.get("Content-Length") or 0) or None
                with tqdm(total=total, unit="B", unit_scale=True, desc=f"download {dest.name}") as bar:
                    while chunk := resp.read(1 << 20):
                        out.write(chunk)
                        bar.update(len(chunk))
        except DOWNLOAD_ERRORS as err:
            raise failed(getattr(err, "reason", None) or err) from err
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp's 0600 -> what a plain open would give
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest


def corpus_path(mirror: str | None = None) -> Path:
    """The training corpus file: from the mirror if one is set, else wiki1m downloaded into the cache."""
    root = mirror_dir(mirror)
    if root is not None:
        for name in MIRROR_CORPUS_NAMES:
            if (root / "corpus" / name).is_file():
                return root / "corpus" / name
        raise FileNotFoundError(f"mirror {root} has no corpus/{{{','.join(MIRROR_CORPUS_NAMES)}}}")
    dest = cache_dir() / "wiki1m_for_simcse.txt"
    return dest if dest.is_file() else _download(WIKI1M_URL, dest)


def senteval_dir(mirror: str | None = None) -> Path:
    """SentEval's ``downstream`` folder: from the mirror if set, else the SentEval archive, unpacked once."""
    root = mirror_dir(mirror)
    if root is not None:
        folder = root / "senteval" / "downstream"
        if not folder.is_dir():
            raise FileNotFoundError(f"mirror {root} has no senteval/downstream folder")
        return folder
    folder = cache_dir() / "senteval" / "downstream"
    if folder.is_dir():
        return folder
    tar = _download(SENTEVAL_URL, cache_dir() / "senteval.tar", error=StsDataError)
    unpack = Path(tempfile.mkdtemp(prefix=".senteval.", dir=cache_dir()))
    try:
        with tarfile.open(tar) as archive:
            archive.extractall(unpack, filter="data")
        found = next(unpack.rglob("downstream"), None)
        if found is None:
            raise FileNotFoundError(f"{SENTEVAL_URL}: archive has no downstream/ folder")
        folder.parent.mkdir(parents=True, exist_ok=True)
        os.replace(found, folder)
    finally:
        shutil.rmtree(unpack, ignore_errors=True)
    return folder


def sts_data_dir(data_dir: str | os.PathLike | None = None, mirror: str | None = None) -> Path:
    """Folder to read STS from: an explicit ``data_dir`` (a prepared folder, a SentEval ``downstream``
    folder, or a mirror root holding ``senteval/downstream``), else the configured source."""
    if data_dir is None:
        return senteval_dir(mirror)
    path = Path(data_dir).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"--data-dir {str(data_dir)!r} does not exist")
    if (path / "senteval" / "downstream").is_dir():
        return path / "senteval" / "downstream"
    return path
