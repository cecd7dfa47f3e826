"""``npu_stream_switch``: the stream scope context manager."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import TracebackType

import torch

# Importing _ops registers the torch.ops.npu_streams.* ops called below.
from npu_streams import _ops, _runtime  # noqa: F401
from npu_streams.errors import StreamTagError

__all__ = ["npu_stream_switch", "current_stream_tag", "scopes_closed_on_error"]


# Lowercase like torch's own context managers (torch.no_grad), and like TorchAir's name.
class npu_stream_switch:
    """Run the ops issued inside the ``with`` block on the stream named ``stream_tag``.

    The same tag always means the same stream on a device; ``"default"`` names the main stream
    (the one current before the outermost scope). Scopes nest. On an accelerator the stream really
    switches in eager mode; on CPU the scope is a no-op that keeps program order. Under
    ``torch.compile`` the block becomes a pair of ``npu_streams`` ops in the graph; a graph break
    inside the block is an error (see :func:`npu_streams.prepare_for_capture`), so compile with
    ``fullgraph=True``.

    Args:
        stream_tag: Name of the stream to switch to.
        stream_priority: Priority the stream is created with (0 = normal, negative = higher),
            where the device supports priorities. Every scope with one tag must use the same value
            (on CPU too, where no stream is created).
        enable_inner_parallel: TorchAir's switch for how CANN's Graph Engine splits the ops of
            this stream further; it has no effect here (``False`` warns once, when the scope
            first runs).

    Raises:
        StreamTagError: The tag is not a non-empty string, the priority is not an int, or
            ``enable_inner_parallel`` is not a bool.

    Example:
        >>> import torch
        >>> from npu_streams import npu_stream_switch
        >>> a, b = torch.ones(2, 2), torch.ones(2, 2)
        >>> with npu_stream_switch("1"):
        ...     y = torch.mm(a, b)  # runs on stream "1" (on CPU: in program order)
        >>> y
        tensor([[2., 2.],
                [2., 2.]])
    """

    def __init__(
        self, stream_tag: str, stream_priority: int = 0, enable_inner_parallel: bool = True
    ) -> None:
        self.stream_tag = _runtime.check_tag(stream_tag, "stream_tag")
        self.stream_priority = _runtime.check_priority(stream_priority)
        if not isinstance(enable_inner_parallel, bool):
            raise StreamTagError(
                f"enable_inner_parallel must be True or False, got {enable_inner_parallel!r}"
            )
        self.enable_inner_parallel = enable_inner_parallel

    def __enter__(self) -> npu_stream_switch:
        if self.enable_inner_parallel:
            torch.ops.npu_streams.stream_enter(self.stream_tag, str(self.stream_priority))
        else:  # only then does the op carry it (it warns once when it runs)
            torch.ops.npu_streams.stream_enter(self.stream_tag, str(self.stream_priority), "False")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        torch.ops.npu_streams.stream_exit(self.stream_tag)

    def __repr__(self) -> str:
        return f"npu_stream_switch({self.stream_tag!r}, stream_priority={self.stream_priority})"


def current_stream_tag() -> str:
    """The tag of the innermost open ``npu_stream_switch`` on this thread (eager).

    Returns:
        The tag, or ``"default"`` outside every scope.
    """
    return _runtime.current_tag()


@contextlib.contextmanager
def scopes_closed_on_error() -> Iterator[None]:
    """Close the scopes left open by an exception inside the block, restoring the stream.

    Around a compiled graph with stream scopes: the graph opens and closes each scope with an
    op, with no ``finally`` between them, so an exception raised inside a scope would leave it
    open and its stream current (and a device capture could not end on its own stream). A
    block that finishes normally is left alone.

    Example:
        >>> from npu_streams import current_stream_tag, scopes_closed_on_error
        >>> import torch
        >>> try:
        ...     with scopes_closed_on_error():
        ...         torch.ops.npu_streams.stream_enter("1", "0")  # what a graph does
        ...         raise ValueError("the graph failed inside the scope")
        ... except ValueError:
        ...     pass
        >>> current_stream_tag()
        'default'
    """
    depth = _runtime.scope_depth()
    try:
        yield
    except BaseException:
        _runtime.close_scopes_above(depth)
        raise
