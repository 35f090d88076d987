"""Cut one worker off the brokers: a firewall rule on the group id its process runs with.

The worker runs with a system group of its own (``drill.cut_group``, created
when missing and removed again by :meth:`DrillGroup.remove`), and
``iptables -A OUTPUT -m owner --gid-owner <gid> -p tcp --dport <broker port>
-j DROP`` drops every packet it sends to a broker (loopback traffic goes
through OUTPUT too). Nothing else is matched: no other process runs with that
group, and only the stack's own broker ports are named. A group rather than a
user of its own, because the worker must keep reading the project's
virtualenv and interpreter, which may live under a home only root can read.
"""

from __future__ import annotations

import grp
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from pipeline.errors import BabelStreamError


class NetworkCutUnavailable(BabelStreamError):
    """This machine cannot cut a process off the network (not root, no iptables)."""


def cut_unavailable() -> str | None:
    """Why a worker cannot be cut off here, or None when it can."""
    if os.geteuid() != 0:
        return "cutting a worker off needs root (a firewall rule and a group of its own)"
    if shutil.which("iptables") is None:
        return "iptables is not installed (Debian: apt-get install iptables)"
    probe = subprocess.run(
        ["iptables", "-S", "OUTPUT"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        return f"iptables does not work here: {probe.stderr.strip() or probe.returncode}"
    return None


class DrillGroup:
    """The system group the cut-off worker runs with (created when missing)."""

    def __init__(self, name: str) -> None:
        self.name = name
        try:
            self.gid = grp.getgrnam(name).gr_gid
            self.created = False
        except KeyError:
            subprocess.run(["groupadd", "--system", name], check=True, capture_output=True)
            self.gid = grp.getgrnam(name).gr_gid
            self.created = True

    def remove(self) -> None:
        """Delete the group again if this object created it."""
        if self.created:
            subprocess.run(["groupdel", self.name], check=False, capture_output=True)
            self.created = False


def drop_rules(gid: int, ports: Sequence[int]) -> list[list[str]]:
    """The OUTPUT rules (iptables arguments after ``-A``/``-D``) that cut ``gid`` off ``ports``."""
    return [
        [
            "OUTPUT",
            "-m",
            "owner",
            "--gid-owner",
            str(gid),
            "-p",
            "tcp",
            "--dport",
            str(port),
            "-j",
            "DROP",
        ]
        for port in ports
    ]


def _iptables(action: str, rule: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["iptables", action, *rule], capture_output=True, text=True, check=False)


class NetworkCut:
    """Drops what processes of group ``gid`` send to ``ports`` while :meth:`active`."""

    def __init__(self, gid: int, ports: Sequence[int]) -> None:
        self.rules = drop_rules(gid, ports)

    def cut(self) -> None:
        for rule in self.rules:
            done = _iptables("-A", rule)
            if done.returncode != 0:
                self.heal()
                raise NetworkCutUnavailable(f"iptables -A {' '.join(rule)}: {done.stderr.strip()}")

    def heal(self) -> None:
        """Delete every copy of the rules (idempotent: safe after a failure)."""
        for rule in self.rules:
            while _iptables("-C", rule).returncode == 0:
                _iptables("-D", rule)

    @contextmanager
    def active(self) -> Iterator[None]:
        """The cut, healed on the way out whatever happens."""
        self.cut()
        try:
            yield
        finally:
            self.heal()
