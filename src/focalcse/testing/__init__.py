"""What the tests, ``scripts/probe.py`` and ``scripts/pool_demo.py`` share: a throw-away copy of the
repository with a tiny config (:mod:`.project`) and a local ``mlflow server`` (:mod:`.mlflow_server`).

Both work on a source checkout (the copy is made from ``git ls-files``), not on an installed wheel.
"""
