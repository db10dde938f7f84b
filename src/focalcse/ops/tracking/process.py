"""Whose process a run is (host, pid, its start time), and whether that process is gone."""

from __future__ import annotations

import os
import socket
from typing import Any

# ---------------------------------------------------------------- whose process a run is
# A run records the process that writes it (tags ``focalcse.host``, ``focalcse.pid``,
# ``focalcse.pid_start``, ``focalcse.machine_id``; the same keys, unprefixed, in its queue header).
# It is judged dead only from the machine that ran it, and only when that process is gone.
IDENTITY_KEYS = ("host", "pid", "pid_start", "machine_id")


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


def _boot_id() -> str | None:
    """This boot of the kernel (Linux); a process start time is only comparable within one boot."""
    return _read_text("/proc/sys/kernel/random/boot_id")


def _machine_id() -> str | None:
    """This machine's id (systemd / D-Bus), stable across reboots; None where there is none."""
    return _read_text("/etc/machine-id") or _read_text("/var/lib/dbus/machine-id")


def _start_ticks(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/<pid>/stat`` field 22), or None
    when no such process runs (a zombie, killed and not yet reaped, counts as gone)."""
    stat = _read_text(f"/proc/{int(pid)}/stat")
    if stat is None:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def process_identity(pid: int | None = None) -> dict[str, str]:
    """``host``, ``pid`` and, where the OS tells, ``pid_start`` (``<boot id>:<start ticks>``, so a
    reused PID is told apart) and ``machine_id`` of process ``pid`` (default: this one)."""
    pid = os.getpid() if pid is None else int(pid)
    out = {"host": socket.gethostname(), "pid": str(pid)}
    boot, ticks = _boot_id(), _start_ticks(pid)
    if boot and ticks:
        out["pid_start"] = f"{boot}:{ticks}"
    machine = _machine_id()
    if machine:
        out["machine_id"] = machine
    return out


def identity_tags(pid: int | None = None) -> dict[str, str]:
    """:func:`process_identity` as run tags (``focalcse.<key>``)."""
    return {f"focalcse.{k}": v for k, v in process_identity(pid).items()}


def _identity_of(tags: dict[str, str], header: dict[str, Any] | None = None) -> dict[str, Any]:
    """The process a run names: its tags (updated by every attempt that resumes it), else its queue
    header."""
    if "focalcse.pid" in tags:
        return {k: tags[f"focalcse.{k}"] for k in IDENTITY_KEYS if f"focalcse.{k}" in tags}
    return {k: header[k] for k in IDENTITY_KEYS if k in (header or {})}


def process_gone(identity: dict[str, Any]) -> bool:
    """Whether the process ``identity`` names (see :func:`process_identity`) is certainly gone.

    Only a process of this machine can be judged: another host name (or, same name, another machine
    id) is never gone from here. On this machine it is gone when its PID no longer runs or now runs
    a process started at another time (PID reuse), or when it started before a reboot."""
    if not identity.get("host") or identity["host"] != socket.gethostname():
        return False
    mine, theirs = _machine_id(), identity.get("machine_id")
    if mine and theirs and mine != theirs:
        return False  # a machine of the same name
    try:
        pid = int(identity["pid"])
    except (KeyError, TypeError, ValueError):
        return False
    ticks = None
    if identity.get("pid_start"):  # (none recorded: another OS, or a run from before they were)
        boot, _, ticks = str(identity["pid_start"]).rpartition(":")
        if boot != _boot_id():  # started before a reboot of this machine, or on another machine
            return bool(mine and theirs == mine)
    now = _start_ticks(pid)  # None: not running, a zombie, or hidden (another user's, hidepid)
    if now is not None:
        return ticks is not None and now != ticks  # another start time: the PID was reused
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: it runs, as another user
        return False
    return _boot_id() is not None  # Linux: signalable but not running, a zombie; elsewhere: alive


def _kill_if_gone(client: Any, run_id: str, header: dict[str, Any] | None = None, run: Any = None) -> bool:
    """End ``run_id`` KILLED if it is still RUNNING and the process it names is gone."""
    run = run if run is not None else client.get_run(run_id)
    if run.info.status != "RUNNING":
        return False
    identity = _identity_of(run.data.tags, header)
    if not process_gone(identity):
        return False
    client.set_terminated(run_id, status="KILLED")
    print(
        f"MLflow run {run_id} marked KILLED: its process {identity.get('pid')} on "
        f"{identity.get('host')} is gone"
    )
    return True
