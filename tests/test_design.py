"""The package's shape, as DESIGN.md states it: layers, one state object, one decision table."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from numapin.cpuset import CpuSet
from numapin.pinning.decision import ExternalMaskPolicy, MaskOwner, PinAction, decide

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "numapin"

#: The layers, lowest first: each is a folder of the package (or one module at its top). A module
#: may import from its own layer and those below, never above, at module level or inside a
#: function alike; inside a layer the imports form no cycle (so no import dodges one).
LAYERS: list[str] = [
    "base",  # plumbing every layer may use (and the version)
    "cpuset",
    "facts",  # what the machine is, read once per root
    "kernel",  # the only code that changes the kernel's state
    "placement",  # pure: facts + request -> Placement
    "pinning",  # the stateful part: decide, walk, record
    "tools",  # what the command line runs
    "compat",  # other projects' contracts
    "face",  # the start-up file's entry, the command line, the package's public names
]
FACE = {"startup", "cli", "__main__", "__init__"}


def layer_of(module: str) -> int:
    top = module.split(".")[0]
    if module in FACE:
        return LAYERS.index("face")
    if module == "version":
        return LAYERS.index("base")
    return LAYERS.index(top)


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1]) if parts[-1] == "__init__" and len(parts) > 1 else ".".join(parts)
        found[name] = path
    return found


def _imports(name: str, path: Path, modules: set[str]) -> set[str]:
    """Every numapin module ``name`` imports, wherever the import statement stands."""
    package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
    if name == "__init__":
        package = []
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if node.module and node.module.startswith("numapin"):
                    base = node.module.split(".")[1:]
                else:
                    continue
            else:
                base = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            for alias in node.names:
                candidate = ".".join([*base, alias.name])
                target = candidate if candidate in modules else ".".join(base) or "__init__"
                found.add(target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("numapin."):
                    found.add(alias.name.split(".", 1)[1])
    return found - {name}


def test_every_module_has_a_layer_and_the_top_holds_only_the_face() -> None:
    modules = _modules()
    for name in modules:
        layer_of(name)  # a ValueError for a folder that is no layer
    top = {name for name in modules if "." not in name and name not in LAYERS}
    assert top == FACE | {"version"}, "a new module belongs in the folder of its layer"


@pytest.mark.parametrize("name", sorted(_modules()))
def test_imports_only_go_down(name: str) -> None:
    modules = _modules()
    upward = {m: LAYERS[layer_of(m)] for m in _imports(name, modules[name], set(modules))
              if layer_of(m) > layer_of(name)}
    assert not upward, f"{name} ({LAYERS[layer_of(name)]}) imports from a layer above: {upward}"


def test_no_import_cycle_inside_a_layer() -> None:
    modules = _modules()
    graph = {name: {m for m in _imports(name, path, set(modules)) if layer_of(m) == layer_of(name)}
             for name, path in modules.items()}
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"an import cycle: {' -> '.join((*path, name))}"
        if name in done:
            return
        for nxt in graph[name]:
            visit(nxt, (*path, name))
        done.add(name)

    for name in graph:
        visit(name, ())


def test_module_state_is_only_the_pin_state() -> None:
    # Rebinding a module global needs `global`; the one place allowed is the
    # fork hook that gives a child its own PinState.
    holders = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Global):
                holders.append((name, tuple(node.names)))
    assert holders == [("pinning.state", ("_STATE",))]


# -- the decision: policy x ownership, no kernel ---------------------------------

BASELINE, WORKERS = CpuSet("0-7"), CpuSet("0-3")
OWN = [CpuSet("0-3")]
MASKS = {
    "wider than the baseline": CpuSet("0-15"),
    "the baseline": CpuSet("0-7"),
    "numapin's own": CpuSet("0-3"),
    "external, overlapping": CpuSet("2-5"),
    "external, disjoint": CpuSet("6-7"),
}
TABLE = {
    # policy:        mask label:                 (ownership, action, target)
    ExternalMaskPolicy.RESPECT: {
        "wider than the baseline": (MaskOwner.UNCONSTRAINED, PinAction.PINNED, "0-3"),
        "the baseline": (MaskOwner.UNCONSTRAINED, PinAction.PINNED, "0-3"),
        "numapin's own": (MaskOwner.OWN, PinAction.PINNED, "0-3"),
        "external, overlapping": (MaskOwner.EXTERNAL, PinAction.PINNED_INSIDE, "2-3"),
        "external, disjoint": (MaskOwner.EXTERNAL, PinAction.KEPT_EXTERNAL, ""),
    },
    ExternalMaskPolicy.OVERRIDE: {
        "wider than the baseline": (MaskOwner.UNCONSTRAINED, PinAction.PINNED, "0-3"),
        "the baseline": (MaskOwner.UNCONSTRAINED, PinAction.PINNED, "0-3"),
        "numapin's own": (MaskOwner.OWN, PinAction.PINNED, "0-3"),
        "external, overlapping": (MaskOwner.EXTERNAL, PinAction.OVERRODE, "0-3"),
        "external, disjoint": (MaskOwner.EXTERNAL, PinAction.OVERRODE, "0-3"),
    },
    ExternalMaskPolicy.RESET: {
        "wider than the baseline": (MaskOwner.UNCONSTRAINED, PinAction.PINNED, "0-3"),
        "the baseline": (MaskOwner.UNCONSTRAINED, PinAction.PINNED, "0-3"),
        "numapin's own": (MaskOwner.OWN, PinAction.PINNED, "0-3"),
        "external, overlapping": (MaskOwner.EXTERNAL, PinAction.RESET, "0-7"),
        "external, disjoint": (MaskOwner.EXTERNAL, PinAction.RESET, "0-7"),
    },
    ExternalMaskPolicy.OFF: {
        "wider than the baseline": (MaskOwner.UNCONSTRAINED, PinAction.OFF, ""),
        "the baseline": (MaskOwner.UNCONSTRAINED, PinAction.OFF, ""),
        "numapin's own": (MaskOwner.OWN, PinAction.OFF, ""),
        "external, overlapping": (MaskOwner.EXTERNAL, PinAction.OFF, ""),
        "external, disjoint": (MaskOwner.EXTERNAL, PinAction.OFF, ""),
    },
}


def test_the_table_covers_every_policy_and_case() -> None:
    assert set(TABLE) == set(ExternalMaskPolicy) and all(set(row) == set(MASKS) for row in TABLE.values())


@pytest.mark.parametrize(("policy", "label"), [(p, m) for p in ExternalMaskPolicy for m in MASKS])
def test_decision_table(policy: ExternalMaskPolicy, label: str) -> None:
    decision = decide(MASKS[label], BASELINE, OWN, policy, WORKERS)
    ownership, action, target = TABLE[policy][label]
    assert (decision.ownership, decision.action, str(decision.target)) == (ownership, action, target)


def test_a_mask_is_numapins_only_while_it_is_in_the_record() -> None:
    kept = decide(CpuSet("0-3"), BASELINE, [], ExternalMaskPolicy.RESPECT, CpuSet("4-7"))
    assert kept.action is PinAction.KEPT_EXTERNAL
    assert decide(CpuSet("0-3"), BASELINE, OWN, ExternalMaskPolicy.RESPECT, CpuSet("4-7")).target == CpuSet("4-7")


def test_every_usage_error_raised_names_the_input_at_fault() -> None:
    # Callers match the field, not the message text: each raise of a usage error fills `value`.
    usage = {"UsageError", "UnknownGpu"}
    bare = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                called = node.exc.func
                if isinstance(called, ast.Name) and called.id in usage \
                        and not any(k.arg == "value" for k in node.exc.keywords):
                    bare.append(f"{name}:{node.lineno}")
    assert bare == []


def test_every_kernel_refusal_carries_its_errno_name() -> None:
    from numapin.pinning.memory import MemoryPolicyError, _refused

    refusal = _refused("set_mempolicy(BIND, nodes 9)", OSError(22, "Invalid argument"))
    assert isinstance(refusal, MemoryPolicyError) and refusal.errno == "EINVAL" and "EINVAL" in str(refusal)


def test_a_lease_takes_exactly_pins_parameters() -> None:
    # pinned() spells out pin()'s parameters (so that help() and type checkers show them): they must not drift.
    import inspect

    import numapin

    assert inspect.signature(numapin.pinned).parameters == inspect.signature(numapin.pin).parameters
