"""What a :class:`~npu_static_kernel.StaticKernelCompiler` did, counted for tests and logs."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

from npu_static_kernel._counting import expect_moves

__all__ = ["StaticKernelCounters"]


@dataclass
class StaticKernelCounters:
    """What a :class:`StaticKernelCompiler` did, for tests and logs.

    Attributes:
        records: Op statistics recordings written.
        builds: Artifacts built by this process.
        hits: Artifacts found on disk (built by another process or an earlier run).
        installs: Artifacts installed by this process (node leader only).
        loads: Artifacts loaded (every process, once per key).
        fallbacks: Graph keys that run without static kernels (with a logged reason).
    """

    records: int = 0
    builds: int = 0
    hits: int = 0
    installs: int = 0
    loads: int = 0
    fallbacks: int = 0

    def snapshot(self) -> dict[str, int]:
        """The current values as a plain dict."""
        return dataclasses.asdict(self)

    def expect(self, **deltas: int) -> contextlib.AbstractContextManager[None]:
        """Assert how much each named counter moves inside the ``with`` block.

        Raises:
            AssertionError: A counter moved by another amount (all mismatches are listed).
            TypeError: A name that is not a counter.
        """
        return expect_moves(self.snapshot, deltas, "static kernel counters")
