"""The package's shape, as DESIGN.md states it: layers, one state object, one decision table."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

import numapin
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
    "pinning",  # the stateful part: this process's pins, records and buffers
    "observe",  # looking at another process: the one judge and its verdict, nothing changed
    "tools",  # what the command line runs
    "compat",  # other projects' contracts
    "face",  # the start-up file's entry, the command line, the package's public names
]
FACE = {"startup", "cli", "__main__", "__init__"}


def layer_of(module: str) -> int:
    top = module.split(".")[0]
    if top in FACE:  # the command line is a folder of the face: a module per command
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


#: The only module state numapin keeps, each with why it must live for the whole process. Anything else
#: (a cache, a flag, a one-element list standing in for a global) belongs in one of these.
MODULE_STATE = {
    ("pinning.state", "_STATE"): "the pin state: what numapin applied and remembers (a new one in a forked child)",
    ("pinning.state", "_FORKING"): "the thread that forks, from before fork to the child's hook",
    ("facts.machine", "_MACHINES"): "the one cache of facts: each machine read once per root",
    ("facts.gpu", "_VENDORS"): "one Vendor object per row of the accelerators' table, so that `is` holds",
    ("facts.machine", "_LOCK"): "the lock of that cache (a new one in a forked child)",
    ("startup", "_STARTED"): "what the start-up file did in this interpreter (site runs it twice in a venv)",
    ("pinning.memory", "_LINUX"): "the memory-policy syscalls through libc, loaded on first use",
    ("kernel.affinity", "_LIBC"): "libc for masks of more than 64 CPU ids, loaded on first use",
    ("kernel.affinity", "_COUNTED"): "os.cpu_count(), asked once a process (it only picks how masks travel)",
    ("compat.patching", "_asking"): "per thread, the modules numapin's import hooks are asking other finders for",
    ("facts.podresources", "_ANSWERS"): "the kubelet's last answers, which stand in (said stale) where it hangs",
    ("facts.podresources", "_QUIET"): "until when a kubelet that did not answer is not asked again, and why",
    ("kernel.mapping", "_LIBC"): "libc with madvise, mlock and memset typed, loaded on first use",
    ("pinning.host_buffer", "_OPEN"): "the host buffers still open, closed at interpreter exit (registered first)",
    ("pinning.host_buffer", "_OPEN_BYTES"): "their bytes, so that a declaration counts those it does not list in O(1)",
    ("compat.numactl_front", "_HELD"): "the locks this process holds on numactl stand-ins (in use until it exits)",
    ("pinning.host_buffer", "_AT_EXIT"): "whether the exit hook is registered: once a process, not once a buffer",
    ("compat.torch_device", "_FOLLOWER"): "which GPU the process named first through PyTorch (a new one in a child)",
    ("compat.torch_device", "_AT_EXIT"): "why the start-up hook left the process unplaced, said at exit if it names "
                                         "no GPU (registered once)",
}
#: The state a forked child must not inherit as it is: its module resets it in an at-fork hook.
RESET_AT_FORK = {"pinning.state", "facts.machine", "compat.torch_device"}

_MUTATORS = {"append", "extend", "add", "update", "clear", "pop", "popitem", "setdefault", "insert", "remove",
             "discard"}


def _mutable(value: ast.expr, classes: set[str]) -> bool:
    """A fresh mutable object: a container, a lock, a thread's own store, or a class of the module that is one."""
    if isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        called = value.func
        name = called.attr if isinstance(called, ast.Attribute) else called.id if isinstance(called, ast.Name) else ""
        return name in {"dict", "list", "set", "defaultdict", "Lock", "RLock", "OrderedDict", "local", "WeakSet",
                        "WeakValueDictionary", "WeakKeyDictionary"} | classes
    return False


def _root(node: ast.expr) -> ast.expr:
    """``a`` of ``a.b.c``: the module-level name a change through attributes lands on."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def _module_state(tree: ast.Module) -> set[str]:
    """Module-level names bound to a mutable object that the module changes, or rebinds through ``global``."""
    # Classes of the module that are thread-local stores: an instance at module level is state too.
    local_classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)
                     and any(isinstance(b, ast.Attribute) and b.attr == "local" for b in node.bases)}
    candidates = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, ast.AnnAssign) and node.value is not None else []
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        for target in targets:
            if isinstance(target, ast.Name) and value is not None and _mutable(value, local_classes):
                candidates.add(target.id)
    changed = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            changed.update(node.names)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                    changed.add(target.value.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _MUTATORS and isinstance(_root(node.func.value), ast.Name):
            changed.add(_root(node.func.value).id)  # type: ignore[attr-defined]
    return candidates & changed


def test_module_state_is_only_what_is_listed() -> None:
    found = set()
    for name, path in _modules().items():
        tree = ast.parse(path.read_text())
        found |= {(name, held) for held in _module_state(tree)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                found |= {(name, held) for held in node.names}
    assert found == set(MODULE_STATE), "module state numapin keeps: list it in MODULE_STATE with its reason"


def test_state_a_forked_child_must_not_inherit_is_reset_at_fork() -> None:
    for name in RESET_AT_FORK:
        assert "register_at_fork(" in _modules()[name].read_text(), name


def test_the_state_rule_sees_state_kept_in_a_one_element_list() -> None:
    # The rule must catch what a search for `global` misses: state in a list, a dict, a set.
    code = ("import threading\nclass _Mine(threading.local):\n    pass\n_FLAG = [0]\n_SEEN = {}\nTABLE = {1: 2}\n"
            "_HELD = _Mine()\ndef f():\n    _FLAG[0] = 1\n    _SEEN.setdefault(1, 2)\n    _HELD.names.add(1)\n")
    assert _module_state(ast.parse(code)) == {"_FLAG", "_SEEN", "_HELD"}


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
    # Callers match the field, not the message text: each raise of a usage error fills `value` with the
    # input (a name bound to it, or an expression of it), never a constant that names nothing.
    usage = {"UsageError", "UnknownGpu"}
    bare = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                called = node.exc.func
                if not (isinstance(called, ast.Name) and called.id in usage):
                    continue
                value = next((k.value for k in node.exc.keywords if k.arg == "value"), None)
                if value is None or isinstance(value, ast.Constant):
                    bare.append(f"{name}:{node.lineno}")
    assert bare == []


BAD_INPUTS = {
    # a call on a machine under root, and the input at fault
    "cpulist": (lambda root: CpuSet.parse("0-x"), None),
    "pin-cpus": (lambda root: numapin.pin(cpus="0-x", root=root), "0-x"),
    "mode": (lambda root: numapin.plan(mode="sideways", root=root), "sideways"),
    "policy": (lambda root: numapin.pin(cpus="0", policy="maybe", root=root), "maybe"),
    "memory": (lambda root: numapin.pin(cpus="0", memory="everywhere", root=root), "everywhere"),
    "gpu": (lambda root: numapin.plan(99, root=root, environ={}), 99),
    "reserve": (lambda root: numapin.plan(0, reserve=-1, root=root, environ={}), -1),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_a_usage_error_holds_the_input_at_fault(case: str, machine_root: Callable[[str], Path]) -> None:
    call, at_fault = BAD_INPUTS[case]
    with pytest.raises(ValueError) as raised:  # every UsageError is a ValueError, as CpuSet.parse's own
        call(machine_root("dgx-h100"))
    if isinstance(raised.value, numapin.UsageError):
        assert raised.value.value == at_fault, raised.value
    else:
        assert at_fault is None and "0-x" in str(raised.value)


def test_every_kernel_refusal_carries_its_errno_name() -> None:
    from numapin.pinning.memory import MemoryPolicyError, _refused

    refusal = _refused("set_mempolicy(BIND, nodes 9)", OSError(22, "Invalid argument"))
    assert isinstance(refusal, MemoryPolicyError) and refusal.errno == "EINVAL" and "EINVAL" in str(refusal)


def test_a_lease_takes_exactly_pins_parameters() -> None:
    # pinned() spells out pin()'s parameters (so that help() and type checkers show them): they must not drift.
    import inspect

    import numapin

    assert inspect.signature(numapin.pinned).parameters == inspect.signature(numapin.pin).parameters


def test_every_file_the_guest_tier_runs_in_its_guests_is_there() -> None:
    # The guest tier runs a list of the kernel-facing test files inside each guest; a file renamed here and not
    # there ran nothing, and was found only in CI's slowest tier.
    conftest = PACKAGE.parents[1] / "tests" / "guest" / "conftest.py"
    tree = ast.parse(conftest.read_text())
    listed = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "KERNEL_FACING" for t in node.targets))
    missing = [path for path in listed if not (PACKAGE.parents[1] / path).is_file()]
    assert len(listed) >= 5 and missing == [], missing


def test_no_module_is_a_house_of_its_own() -> None:
    # A module past 600 lines holds more than one room: split it where its ideas part.
    sizes = {path.relative_to(PACKAGE).as_posix(): len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")}
    assert sizes, "no module found (the check below can fail)"
    assert {name: size for name, size in sizes.items() if size > 600} == {}


def _body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The lines of a function's body, its docstring not counted (a nested function's lines count as its own)."""
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return 0 if not body else (body[-1].end_lineno or body[-1].lineno) - body[0].lineno + 1


def test_no_function_is_over_sixty_lines() -> None:
    # The functions a newcomer meets first are where the next change lands: past 60 lines of body, one holds
    # more than one idea; split it where they part (doctor's checks are a table for this reason).
    found = {f"{path.relative_to(PACKAGE).as_posix()}:{node.lineno}:{node.name}": _body_lines(node)
             for path in PACKAGE.rglob("*.py") for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assert len(found) > 500, "too few functions found (the check below can fail)"
    assert {name: n for name, n in found.items() if n > 60} == {}


def test_the_body_count_leaves_out_the_docstring_alone() -> None:
    tree = ast.parse('def f():\n    """doc\n    more"""\n    a = 1\n    return a\n\ndef g():\n    """only"""\n')
    counts = [_body_lines(node) for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert counts == [2, 0]


def _resolves(dotted: str) -> bool:
    """Whether ``numapin.a.b.C`` names a module of the package, and a name defined there where one follows."""
    parts = dotted.split(".")[1:]
    for cut in range(len(parts), -1, -1):
        path = PACKAGE.joinpath(*parts[:cut])
        source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        if source.is_file():
            rest = parts[cut:]
            if not rest:
                return True
            text, name = source.read_text(), rest[0]
            # Defined there, or a public name the package's face imports on first use (its table quotes it).
            return any(pattern in text for pattern in (f"def {name}(", f"class {name}", f"\n{name} =", f"\n{name}:",
                                                       f"    {name}:", f"    {name} =", f'"{name}"'))
    return False


def test_every_module_a_comment_names_exists() -> None:
    # A comment naming a module that moved sends the reader nowhere (12 did, after the layers were drawn).
    import re

    named = {(m.group(0).rstrip("."), path.relative_to(PACKAGE).as_posix()) for path in PACKAGE.rglob("*.py")
             for m in re.finditer(r"numapin(?:\.[A-Za-z_][A-Za-z0-9_]*)+", path.read_text())}
    assert len(named) > 50, "too few names found (the check below can fail)"
    files = {"numapin.prom"}  # the textfile collector's file, a name and no module
    assert sorted((name, where) for name, where in named if not _resolves(name) and name not in files) == []
    assert not _resolves("numapin.walk.Walk") and _resolves("numapin.pinning.walk.Walk")


def test_each_accelerator_vendor_id_is_written_in_one_module() -> None:
    # The accelerators' table (facts.glance.ACCELERATORS) is the one place of their PCI ids and drivers; the
    # synthetic machines' writer makes sysfs as each driver does, and writes them too.
    from numapin.facts.glance import ACCELERATORS

    for vendor_id in (row.pci_vendor for row in ACCELERATORS.values()):
        spellings = [f"{vendor_id:#06x}", f"{vendor_id:#06X}".replace("0X", "0x")]
        holders = sorted(path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
                         if path.name != "synthetic.py" and any(s in path.read_text() for s in spellings))
        assert holders == ["facts/glance.py"], (f"{vendor_id:#06x}", holders)


def test_the_accelerators_table_names_every_vendor_and_its_module() -> None:
    # Adding a vendor is its row and its module: the module answers what every vendor's answers.
    import importlib
    import inspect

    from numapin.facts.glance import ACCELERATORS
    from numapin.facts.gpu import Vendor

    assert [v.value for v in Vendor.every()] == list(ACCELERATORS) and Vendor("amd") is Vendor.AMD
    shapes = set()
    for row in ACCELERATORS.values():
        module = importlib.import_module(row.module)
        assert row.driver and {"read", "visible", "in_view"} <= set(module.__all__), row.module
        shapes.add(tuple(tuple(inspect.signature(getattr(module, name)).parameters)
                         for name in ("read", "visible", "in_view")))
    assert len(shapes) == 1, shapes
