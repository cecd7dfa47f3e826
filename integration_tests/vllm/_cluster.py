"""Two vLLM nodes on one machine over loopback, and nothing of them left behind.

Each node is a process in a session of its own (its workers, engine core and resource tracker join
its process group) and carries a tag in its environment that every process it starts inherits.
Leaving a :class:`Cluster` stops every node, whether the test passed or failed: SIGTERM to each
process group, SIGKILL to whatever is left after a grace period. Then ``/proc`` is searched for the
tag; a tagged process still alive is killed and reported, so a test that leaves a process behind
fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

#: Set in the environment of every process a cluster starts; its value names the cluster.
TAG_VARIABLE = "NPU_COMPILE_TEST_CLUSTER"
# vLLM's workers stop within its own shutdown timeouts (about 10 s) once their node is told to.
GRACE_SECONDS = 30.0


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now, below the kernel's ephemeral range.

    The master port is listened on only when node 0's worker starts, a minute later. A port the
    kernel hands out for ``bind(("", 0))`` (as vLLM's own port picks do, in both nodes) could go to
    another socket meanwhile; one below that range is never handed out.
    """
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    below = range(20000, min(low, 30000))
    # (A machine whose ephemeral range starts lower takes the kernel's pick.)
    candidates = random.Random().sample(below, 200) if len(below) >= 200 else [0]
    for port in candidates:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:  # in use
                continue
            chosen: int = probe.getsockname()[1]
            return chosen
    raise RuntimeError(f"no free port among {len(candidates)} tried below {low}")


def serve_flags(options: Mapping[str, Any]) -> list[str]:
    """``vllm.LLM`` keyword arguments as the flags of ``vllm serve``."""
    flags: list[str] = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif isinstance(value, dict):
            flags += [flag, json.dumps(value)]
        elif value is False or value is None:
            raise ValueError(f"{name}={value!r} has no `vllm serve` flag here; leave it out")
        else:
            flags += [flag, str(value)]
    return flags


def tagged_processes(tag: str) -> list[tuple[int, str]]:
    """Live processes whose environment carries ``tag``: ``(pid, command line)``."""
    needle = f"{TAG_VARIABLE}={tag}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()
            stat = Path(entry.path, "stat").read_text()
            cmdline = Path(entry.path, "cmdline").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        # A zombie has exited and only waits for its parent; its environment reads empty anyway.
        state = stat.rsplit(")", 1)[-1].split()[0]
        if needle in environ.split(b"\0") and state != "Z":
            found.append((int(entry.name), cmdline.replace(b"\0", b" ").decode(errors="replace")))
    return found


@dataclass
class Node:
    """One node's main process and where its output goes."""

    rank: int
    process: subprocess.Popen[bytes]
    log: Path
    _out: IO[bytes]

    def output(self) -> str:
        """Everything the node and its workers printed so far."""
        self._out.flush()
        return self.log.read_text(errors="replace")

    def tail(self, chars: int = 6000) -> str:
        """The end of :meth:`output`, for assertion messages."""
        return f"--- node {self.rank} ({self.log}) ---\n{self.output()[-chars:]}"


class Cluster:
    """Nodes started on this machine; all of them stopped when the ``with`` block ends."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.tag = uuid.uuid4().hex
        self.nodes: list[Node] = []

    def __enter__(self) -> Cluster:
        return self

    def start(self, rank: int, argv: list[str], env: Mapping[str, str], cwd: Path) -> Node:
        """Start node ``rank`` in a session of its own, its output in ``node<rank>.log``."""
        log = self.directory / f"node{rank}.log"
        out = log.open("wb")
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**env, TAG_VARIABLE: self.tag},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        node = Node(rank, process, log, out)
        self.nodes.append(node)
        return node

    def wait(self, node: Node, timeout: float) -> int:
        """The node's exit status; an ``AssertionError`` if it runs past ``timeout``."""
        try:
            return node.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            tails = "\n".join(n.tail() for n in self.nodes)
            message = f"node {node.rank} still ran after {timeout:.0f} s\n{tails}"
            raise AssertionError(message) from None

    def processes(self) -> list[tuple[int, str]]:
        """The live processes this cluster started, workers included."""
        return tagged_processes(self.tag)

    def stop(self) -> list[tuple[int, str]]:
        """Stop every node and its children; return the processes that outlived their group."""
        for node in self.nodes:
            _signal_group(node.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        for node in self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        # The main process may be gone while a child of its group lives on: the group, not the pid.
        for node in self.nodes:
            _signal_group(node.process.pid, signal.SIGKILL)
            node.process.wait()
            node._out.close()
        left = self.processes()
        for pid, _ in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return left

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        left = self.stop()
        if left and kind is None:
            raise AssertionError(f"processes outlived their node, killed now: {left}")


def _signal_group(pgid: int, signum: int) -> None:
    # ProcessLookupError: every process of the group has exited.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def python(*args: str) -> list[str]:
    """The command line of a module of this repository run by this interpreter."""
    return [sys.executable, "-m", *args]
