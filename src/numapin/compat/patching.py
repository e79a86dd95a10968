"""Replace a function of another project wherever it is bound, now or when its module is first imported.

Projects import such functions by name (``from pkg.utils import f``), so
replacing the attribute on ``pkg.utils`` alone leaves every earlier importer
with the original. A :class:`FunctionPatch` finds the original by identity in
every loaded module and replaces each binding; when the module is not loaded
yet, an import hook (a finder at the front of ``sys.meta_path``) replaces the
function the moment the module has executed, before any importer can bind it.
Nothing here imports the patched project.

Only module-level names are found: a function stored in a class, a list or
a closure keeps the original (the projects patched here bind it at module level).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType

from ..logger import log
from ..records import record

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["FunctionPatch", "PatchReport"]

_MARK = "__numapin_original__"


@record
class PatchReport:
    """What one ``install()`` or ``uninstall()`` did."""

    target: str
    """``module.function``."""
    replaced: tuple[str, ...] = ()
    """Every ``module.name`` whose binding changed in this call."""
    pending: bool = False
    """The module is not imported yet: the import hook will patch it when it is."""
    refused: str | None = None
    """Why the function was left alone (it is not the shape numapin knows)."""

    def __str__(self) -> str:
        if self.refused:
            return f"numapin: {self.target} left alone: {self.refused}"
        parts = [f"replaced {', '.join(self.replaced)}"] if self.replaced else []
        if self.pending:
            parts.append("will be patched when imported")
        return f"numapin: {self.target}: " + ("; ".join(parts) or "nothing to change")


def _bindings(value: object, modules: Sequence[ModuleType]) -> list[tuple[ModuleType, str]]:
    """Every (module, name) in ``modules`` bound to ``value`` itself."""
    found: list[tuple[ModuleType, str]] = []
    for module in modules:
        try:
            # A copy: another thread may be importing (and so filling a module's namespace) meanwhile.
            names = [name for name, bound in list(vars(module).items()) if bound is value]
        except TypeError:  # not a module (some packages put other objects in sys.modules)
            continue
        found.extend((module, name) for name in names)
    return found


def _loaded() -> list[ModuleType]:
    return [m for m in list(sys.modules.values()) if m is not None]


class FunctionPatch:
    """``module.name`` replaced by ``make(original)`` everywhere it is bound; reversible.

    ``make`` returns the replacement, or raises ``TypeError`` saying why the
    original's shape is unknown (then nothing is replaced, with one warning).
    """

    def __init__(self, module: str, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        self.module = module
        self.name = name
        self.make = make
        self.target = f"{module}.{name}"
        self._lock = threading.RLock()
        self._finder: _Finder | None = None
        self._original: Callable[..., Any] | None = None
        self._replacement: Callable[..., Any] | None = None
        self._warned = False

    @property
    def installed(self) -> bool:
        return self._finder is not None or self._replacement is not None

    def install(self) -> PatchReport:
        """Patch now if the module is loaded, else when it is imported. Idempotent."""
        with self._lock:
            module = sys.modules.get(self.module)
            if module is not None:
                return self._patch(module)
            if self._finder is None:
                self._finder = _Finder(self)
                sys.meta_path.insert(0, self._finder)
            return PatchReport(self.target, pending=True)

    def uninstall(self) -> PatchReport:
        """Put the original back everywhere the replacement is bound, and drop the import hook."""
        with self._lock:
            if self._finder is not None:
                with contextlib.suppress(ValueError):  # someone else rebuilt sys.meta_path
                    sys.meta_path.remove(self._finder)
                self._finder = None
            replacement, original = self._replacement, self._original
            self._replacement = self._original = None
            if replacement is None or original is None:
                return PatchReport(self.target)
            # Every binding of the replacement, including those importers made after install().
            report = self._rebind(replacement, original)
            log.info("%s", report)
            return report

    def _patch(self, module: ModuleType) -> PatchReport:
        """Replace the function of the just-loaded ``module`` wherever it is bound."""
        with self._lock:
            current = getattr(module, self.name, None)
            if current is None:
                return self._refuse(f"{self.module} has no {self.name}")
            if getattr(current, _MARK, None) is not None:
                original = getattr(current, _MARK)
                replacement = current
            else:
                original = current
                try:
                    replacement = self.make(original)
                except TypeError as exc:
                    return self._refuse(str(exc))
                setattr(replacement, _MARK, original)
            self._original, self._replacement = original, replacement
            report = self._rebind(original, replacement)
            if report.replaced:
                log.info("%s", report)
            return report

    def _rebind(self, old: object, new: object) -> PatchReport:
        """Bind ``new`` to every module-level name now bound to ``old`` itself."""
        bound = _bindings(old, _loaded())
        for module, name in bound:
            setattr(module, name, new)
        return PatchReport(self.target, replaced=tuple(f"{m.__name__}.{n}" for m, n in bound))

    def _refuse(self, why: str) -> PatchReport:
        report = PatchReport(self.target, refused=why)
        if not self._warned:
            self._warned = True
            log.warning("%s", report)
        return report


class _Finder:
    """Finds nothing itself: lets the other finders find the module, then wraps its loader."""

    def __init__(self, patch: FunctionPatch) -> None:
        self.patch = patch

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname != self.patch.module:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _PatchingLoader(spec.loader, self.patch)
        return spec


class _PatchingLoader:
    """The module's own loader, followed by the patch once the module's code has run."""

    def __init__(self, loader: Any, patch: FunctionPatch) -> None:
        self._loader = loader
        self._patch = patch

    def create_module(self, spec: Any) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        if self._patch.installed:
            self._patch._patch(module)

    def __getattr__(self, name: str) -> Any:
        # get_source, get_resource_reader, is_package...: whatever the real loader offers.
        return getattr(self._loader, name)
