"""PyTorch over a host buffer: ``numapin.compat.torch_tensor.tensor(buf)``, a tensor of the buffer's own bytes.

A :func:`numapin.host_buffer` is made, bound, filled and (with ``register=True``) registered once; a framework
then wants it as a tensor — a KV-cache offload pool, a staging area — without a copy and without PyTorch
allocating another. ``torch.frombuffer`` does that over any object with the buffer protocol: the tensor shares
the buffer's memory and keeps it alive (its ``close()`` then refuses while the tensor exists). Here, not in the
core: numapin imports torch nowhere else, and only a process that already has it calls this.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..pinning.host_buffer import HostBuffer

__all__ = ["tensor"]


def tensor(buffer: HostBuffer, dtype: Any = None) -> Any:
    """A 1-D tensor over ``buffer``'s bytes (``dtype`` default ``torch.uint8``; the buffer's size must be a
    multiple of its item size), sharing its memory: nothing is copied, nothing allocated."""
    import torch  # the caller's: this helper is for processes that use PyTorch

    return torch.frombuffer(buffer, dtype=torch.uint8 if dtype is None else dtype)
