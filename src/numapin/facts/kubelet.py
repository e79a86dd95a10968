"""What the kubelet of this node decided about CPUs and NUMA nodes, from the files it keeps.

- ``var/lib/kubelet/config.yaml``, the kubelet's configuration file (``KubeletConfiguration``, as
  kubeadm writes it): ``cpuManagerPolicy`` (``none`` when absent), ``topologyManagerPolicy``
  (``none``), ``topologyManagerScope`` (``container``), and the policies' options
  (``cpuManagerPolicyOptions``, ``topologyManagerPolicyOptions``: maps). Read whole with PyYAML (the
  ``kubernetes`` extra's): nested maps and lists, quoting, flow style, comments, JSON (the kubelet takes
  either). Without it, top-level ``key: value`` lines are read (how the three policies are written), and
  every top-level setting whose value lies on the lines below (a nested map or list, a block scalar) is
  named as unread.
- ``var/lib/kubelet/cpu_manager_state``, the CPU manager's checkpoint (JSON): the policy in force
  (``policyName``), the shared pool (``defaultCpuSet``) and each container's exclusive CPUs
  (``entries``: pod UID -> container name -> cpulist; the older format keyed them by container id).

Read through a :class:`Host`, so a folder standing in for ``/`` holds a node's files. Files that
are absent or unreadable are said as such (a DaemonSet without the kubelet's folder mounted): the
findings built on them say what they could not read.
"""

from __future__ import annotations

import re

from ..base.frozen import field, frozen
from ..base.text import json_value
from ..cpuset import CpuSet
from .host import Host

TYPE_CHECKING = False
if TYPE_CHECKING:
    import os

__all__ = ["CONFIG", "STATE", "Kubelet", "read_kubelet"]

CONFIG = "var/lib/kubelet/config.yaml"
STATE = "var/lib/kubelet/cpu_manager_state"

_LINE = re.compile(r"([A-Za-z][A-Za-z0-9]*):[ \t]*(.*?)[ \t]*(?:#.*)?")


@frozen
class Kubelet:
    """The kubelet's CPU and topology settings and its exclusive CPUs, as its files say."""

    config: dict[str, str] | None = None
    """The top-level scalar settings of its configuration file; None when the file could not be read."""
    state_policy: str | None = None
    """The CPU manager policy its checkpoint says is in force; None without a readable checkpoint."""
    exclusive: dict[str, dict[str, CpuSet]] = field(default_factory=dict)
    """Pod UID -> container name -> the CPUs the CPU manager gave it alone."""
    by_container_id: dict[str, CpuSet] = field(default_factory=dict)
    """The same, keyed by container id, from a checkpoint of the older format."""
    options: dict[str, dict[str, str]] = field(default_factory=dict)
    """Its settings that are maps of scalars (``cpuManagerPolicyOptions``...): name -> key -> value."""
    unread: tuple[str, ...] = ()
    """What of the configuration file was not read: top-level settings with nested values (no YAML parser
    here), or the whole file where it is no YAML."""

    @property
    def found(self) -> bool:
        """Whether this node has a kubelet that left either file."""
        return self.config is not None or self.state_policy is not None

    def setting(self, name: str, default: str) -> str:
        return (self.config or {}).get(name) or default

    @property
    def cpu_manager(self) -> str:
        """The CPU manager policy in force: the checkpoint's (what the kubelet runs), else the configuration's."""
        return self.state_policy or self.setting("cpuManagerPolicy", "none")

    @property
    def topology_manager(self) -> str:
        return self.setting("topologyManagerPolicy", "none")

    @property
    def topology_scope(self) -> str:
        return self.setting("topologyManagerScope", "container")


def _scalar(value: object) -> str | None:
    """A setting's value as the kubelet's Go types read it from YAML (``true`` as ``true``); None for a map or
    a list."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return None


def _config(text: str) -> tuple[dict[str, str], dict[str, dict[str, str]], tuple[str, ...]]:
    """The configuration file's scalar settings, its maps of scalars, and what was not read."""
    try:
        import yaml  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return _config_lines(text)
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:
        problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return {}, {}, (f"the whole file (no YAML: {problem})",)
    if data is None:
        return {}, {}, ()
    if not isinstance(data, dict):
        return {}, {}, (f"the whole file (a {type(data).__name__}, not the settings' map)",)
    scalars, options = {}, {}
    for key, value in data.items():
        if (text_value := _scalar(value)) is not None:
            scalars[str(key)] = text_value
        elif isinstance(value, dict):
            options[str(key)] = {str(k): v for k, v in ((k, _scalar(v)) for k, v in value.items()) if v is not None}
    return scalars, options, ()


def _config_lines(text: str) -> tuple[dict[str, str], dict[str, dict[str, str]], tuple[str, ...]]:
    """Without a YAML parser: top-level ``key: value`` lines; a key whose value lies below it is named unread."""
    found, unread = {}, []
    for line in text.splitlines():
        match = _LINE.fullmatch(line)  # column 0 only: nested keys are indented
        if match and match.group(2) and match.group(2)[0] not in "|>{[&*!":
            found[match.group(1)] = match.group(2).strip("\"'")
        elif match:  # a value on the lines below, a block or flow collection, an anchor or a tag: YAML's to read
            unread.append(f"{match.group(1)} (PyYAML reads it: pip install 'numapin[kubernetes]')")
    return found, {}, tuple(unread)


def read_kubelet(root: str | os.PathLike[str] | None = None) -> Kubelet:
    """The kubelet's files under ``root`` (default ``/``)."""
    host = Host.at(root)
    text = host.read(CONFIG)
    config, options, unread = (None, {}, ()) if text is None else _config(text)
    raw = host.read(STATE)
    state = json_value(raw) if raw else None
    if not isinstance(state, dict) or not isinstance(state.get("policyName"), str):
        return Kubelet(config, options=options, unread=unread)
    exclusive: dict[str, dict[str, CpuSet]] = {}
    by_id: dict[str, CpuSet] = {}
    entries = state.get("entries")
    for key, value in (entries.items() if isinstance(entries, dict) else ()):
        if isinstance(value, str):  # the older checkpoint: container id -> cpulist
            cpus = CpuSet.parse_or_none(value)
            if cpus is not None:
                by_id[key] = cpus
        elif isinstance(value, dict):
            containers = {name: cpus for name, text in value.items()
                          if isinstance(text, str) and (cpus := CpuSet.parse_or_none(text)) is not None}
            exclusive[key] = containers
    return Kubelet(config, state["policyName"], exclusive, by_id, options, unread)
