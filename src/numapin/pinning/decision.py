"""What a pin does with the process mask: a pure decision, one table of policy × ownership.

A mask is *external* only when it is neither the process's unconstrained
baseline (online CPUs inside the cgroup cpuset) nor numapin's own: what it
applied, as :mod:`numapin.pinning.state` records it. :func:`decide` is the whole
policy, with no kernel call; :mod:`numapin.pinning` carries it out.
"""

from __future__ import annotations

from ..base.choices import Choice, parse_choice
from ..base.frozen import frozen
from ..cpuset import CpuSet

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection

__all__ = ["Decision", "ExternalMaskPolicy", "MaskOwner", "PinAction", "classify", "decide", "parse_policy"]


class ExternalMaskPolicy(Choice):
    """What to do when the process mask is external (set by a launcher, Slurm, numactl...)."""

    RESPECT = "respect"
    """Never widen it: pin to (target ∩ external mask), or leave it and warn once when that is empty."""

    OVERRIDE = "override"
    """Ignore it: pin to the target (which always lies inside the cgroup cpuset)."""

    RESET = "reset"
    """Remove it: restore the unconstrained baseline (TensorRT-LLM's automatic behaviour)."""

    OFF = "off"
    """Do nothing at all."""


def parse_policy(policy: str | ExternalMaskPolicy) -> ExternalMaskPolicy:
    return parse_choice(ExternalMaskPolicy, policy, "policy")


class MaskOwner(Choice):
    """Who set the process mask, as far as numapin can tell."""

    UNCONSTRAINED = "unconstrained"
    OWN = "numapin"
    EXTERNAL = "external"


class PinAction(Choice):
    """What a pin did, as a whole (each thread's own fate is in its :class:`ThreadResult`)."""

    PINNED = "pinned"
    PINNED_INSIDE = "pinned inside the external mask"
    KEPT_EXTERNAL = "kept external mask"
    RESET = "reset the external mask to the baseline"
    OVERRODE = "overrode the external mask"
    NOTHING = "nothing pinned"
    ROLLED_BACK = "rolled back"
    OFF = "off: nothing done"
    PINNED_CALLER = "pinned the calling thread"


@frozen
class Decision:
    """What to do with the process mask: the action, whose mask it is, and the CPUs to apply."""

    action: PinAction
    ownership: MaskOwner
    target: CpuSet  # empty when nothing is to be applied


def classify(mask: CpuSet, baseline: CpuSet, own: Collection[CpuSet]) -> MaskOwner:
    """Whether ``mask`` is the unconstrained baseline, numapin's own (one of ``own``), or someone else's."""
    if mask >= baseline:
        return MaskOwner.UNCONSTRAINED
    if mask in own:
        return MaskOwner.OWN
    return MaskOwner.EXTERNAL


def decide(mask: CpuSet, baseline: CpuSet, own: Collection[CpuSet], policy: ExternalMaskPolicy,
           workers: CpuSet) -> Decision:
    """The whole policy: the process mask ``mask`` × ``policy`` → what to apply. No kernel call.

    ``baseline`` is what the process may use at all, ``own`` the masks numapin
    applied, ``workers`` the placement's CPUs for the worker threads.
    """
    ownership = classify(mask, baseline, own)
    if policy is ExternalMaskPolicy.OFF:
        return Decision(PinAction.OFF, ownership, CpuSet())
    if ownership is not MaskOwner.EXTERNAL:
        return Decision(PinAction.PINNED, ownership, workers)
    if policy is ExternalMaskPolicy.RESPECT:
        inside = workers & mask
        return Decision(PinAction.PINNED_INSIDE if inside else PinAction.KEPT_EXTERNAL, ownership, inside)
    if policy is ExternalMaskPolicy.RESET:
        return Decision(PinAction.RESET, ownership, baseline)
    if policy is ExternalMaskPolicy.OVERRIDE:
        return Decision(PinAction.OVERRODE, ownership, workers)
    raise AssertionError(f"policy {policy} has no decision")  # a new ExternalMaskPolicy must be decided here
