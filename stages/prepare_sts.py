"""DVC stage `prepare_sts`: every registered STS task, read (counts checked) and normalised."""

from __future__ import annotations

from _common import LAYOUT, params

from focalcse.steps import prepare_sts

if __name__ == "__main__":
    manifest = prepare_sts.run(params(), LAYOUT)
    print({k: v["pairs"] for k, v in manifest["files"].items()})
