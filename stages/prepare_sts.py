"""DVC stage `prepare_sts`: read SentEval's STS data (counts checked) into normalised TSVs."""

from __future__ import annotations

from _common import params

from focalcse.pipeline import run_prepare_sts

if __name__ == "__main__":
    manifest = run_prepare_sts(params(), "data/sts")
    print({k: v["pairs"] for k, v in manifest["files"].items()})
