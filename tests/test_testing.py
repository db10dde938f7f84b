"""``focalcse.testing``: the local MLflow server's command and the free port it binds."""

from __future__ import annotations

import socket

from focalcse.testing.mlflow_server import free_port, server_command


def test_server_binds_localhost_with_one_worker() -> None:
    cmd = server_command("mlflow", 5005, "sqlite:////s/mlflow.db", "/s/mlartifacts")
    assert cmd[:2] == ["mlflow", "server"]
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--port") + 1] == "5005"
    assert cmd[cmd.index("--workers") + 1] == "1"
    assert cmd[cmd.index("--artifacts-destination") + 1] == "/s/mlartifacts"
    assert "--artifacts-destination" not in server_command("mlflow", 1, "sqlite:///x.db", None)


def test_free_port_can_be_bound_on_localhost() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
