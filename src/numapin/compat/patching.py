"""Replace a function of another project wherever it is bound, now or when its module is first imported.

Projects import such functions by name (``from pkg.utils import f``), so
replacing the attribute on ``pkg.utils`` alone leaves every earlier importer
with the original. A :class:`FunctionPatch` finds the original by identity in
every loaded module and replaces each binding; when the module is not loaded
yet, an import hook (a finder at the front of ``sys.meta_path``) replaces the
function the moment the module has executed, before any importer can bind it.
Nothing here imports the patched project.

Only module-level names are found: a function stored in a list or a closure
keeps the original (the projects patched here bind it at module level). A method
is patched by naming it ``Class.method``: it is replaced on that class alone,
where every instance and subclass finds it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from types import ModuleType

from ..base.frozen import frozen
from ..base.logger import log

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

__all__ = ["FunctionPatch", "PatchReport"]

_MARK = "__numapin_original__"


@frozen
class PatchReport:
    """What one ``install()`` or ``uninstall()`` did."""

    target: str
    """``module.function``."""
    replaced: tuple[str, ...] = ()
    """Every ``module.name`` bound to numapin's function by this call (``install()``)."""
    restored: tuple[str, ...] = ()
    """Every ``module.name`` given the original back by this call (``uninstall()``)."""
    pending: bool = False
    """The module is not imported yet: the import hook will patch it when it is."""
    refused: str | None = None
    """Why the function was left alone (it is not the shape numapin knows)."""

    def __str__(self) -> str:
        return f"numapin: {self.summary()}"

    def summary(self) -> str:
        """What :func:`str` says, without the leading ``numapin:`` (log records carry the logger's name)."""
        if self.refused:
            return f"{self.target} left alone: {self.refused}"
        parts = [f"replaced {', '.join(self.replaced)}"] if self.replaced else []
        if self.restored:
            parts.append(f"restored {', '.join(self.restored)}")
        if self.pending:
            parts.append("will be patched when imported")
        return f"{self.target}: " + ("; ".join(parts) or "nothing to change")


def _bindings(value: object, modules: Sequence[tuple[str, object]]) -> list[tuple[str, object, str]]:
    """Every ``(key, module, name)`` in ``modules`` (``sys.modules`` items) bound to ``value`` itself."""
    found: list[tuple[str, object, str]] = []
    for key, module in modules:
        try:
            # A copy: another thread may be importing (and so filling a module's namespace) meanwhile.
            names = [name for name, bound in list(vars(module).items()) if bound is value]
        except Exception:  # no namespace (not a module) or one that cannot be read: nothing bound there
            continue
        found.extend((key, module, name) for name in names)
    return found


def _loaded() -> list[tuple[str, object]]:
    return [(key, m) for key, m in list(sys.modules.items()) if m is not None]


class _Unbindable(Exception):
    """A binding that could not be changed (a read-only module): the whole rebinding was undone."""


class FunctionPatch:
    """``module.name`` replaced by ``make(original)`` everywhere it is bound; reversible.

    ``make`` returns the replacement, or raises ``TypeError`` saying why the
    original's shape is unknown (then nothing is replaced, with one warning).
    Nothing here raises into the caller or into an import: whatever goes wrong
    leaves the function alone, with one warning.

    While installed, an import hook stays in ``sys.meta_path``: it patches the
    module when it is first imported, and again when it is reloaded (a reload
    runs the module's code anew and so brings the original back).
    """

    def __init__(self, module: str, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]], *,
                 optional: bool = False) -> None:
        self.module = module
        self.name = name
        self.make = make
        #: A name a version of the module may lack (a deprecated alias): its absence is no warning, one debug line.
        self.optional = optional
        self.target = f"{module}.{name}"
        self._lock = threading.RLock()
        self._finder: _Finder | None = None
        #: Every (original, replacement) this patch bound: one per execution of the module (reloads).
        self._made: list[tuple[Callable[..., Any], Callable[..., Any]]] = []
        self._warned = False

    @property
    def installed(self) -> bool:
        return self._finder is not None

    def install(self) -> PatchReport:
        """Patch now if the module is loaded, else when it is imported. Idempotent; never raises."""
        with self._lock:
            try:
                self._watch()
                module = sys.modules.get(self.module)
                if module is not None:
                    return self._patch(module)
                return PatchReport(self.target, pending=True)
            except Exception as exc:  # a patch must never break its caller
                return self._refuse(f"install failed: {exc}")

    def uninstall(self) -> PatchReport:
        """Put the original back everywhere a replacement is bound, and drop the import hook."""
        with self._lock:
            if self._finder is not None:
                with contextlib.suppress(ValueError):  # someone else rebuilt sys.meta_path
                    sys.meta_path.remove(self._finder)
                self._finder = None
            made, self._made = self._made, []
            restored: list[str] = []
            if "." in self.name:  # a method: put the original back on its class
                holder, attribute = self._holder(sys.modules.get(self.module))
                for original, replacement in made:
                    if isinstance(holder, type) and holder.__dict__.get(attribute) is replacement:
                        setattr(holder, attribute, original)
                        restored.append(self.target)
                made = []
            # Every binding of each replacement, including those importers made after install().
            for original, replacement in made:
                restored.extend(self._rebind(replacement, original, all_or_nothing=False))
            report = PatchReport(self.target, restored=tuple(restored))
            if restored:
                log.info("%s", report.summary())
            return report

    def _watch(self) -> None:
        """Put this patch's import hook first in ``sys.meta_path``, in place of any earlier one for the same
        target (a reloaded numapin module makes a new patch object: two hooks would call each other)."""
        sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "numapin_target", None) != self.target]
        if self._finder is None:
            self._finder = _Finder(self)
        sys.meta_path.insert(0, self._finder)

    def _patch(self, module: object) -> PatchReport:
        """Replace the function of the just-loaded ``module`` wherever it is bound."""
        with self._lock:
            try:
                holder, attribute = self._holder(module)
                current = None if holder is None else holder.__dict__.get(attribute) if isinstance(holder, type) \
                    else getattr(holder, attribute, None)
                if current is None:
                    if self.optional:
                        log.debug("%s: this version has no %s (an alias it dropped); nothing to patch",
                                  self.module, self.name)
                        return PatchReport(self.target, refused=f"{self.module} has no {self.name}")
                    return self._refuse(f"{self.module} has no {self.name}")
                original = getattr(current, _MARK, None)
                if original is not None:  # patched already (by an earlier numapin module, before a reload)
                    replacement = current
                else:
                    original = current
                    try:
                        replacement = self.make(original)
                    except TypeError as exc:
                        return self._refuse(str(exc))
                    setattr(replacement, _MARK, original)
                if isinstance(holder, type):  # a method: its class is the one place it is bound
                    setattr(holder, attribute, replacement)
                    replaced = [self.target]
                else:
                    replaced = self._rebind(original, replacement, all_or_nothing=True)
            except _Unbindable as exc:
                return self._refuse(str(exc))
            except Exception as exc:  # e.g. a module __getattr__ that raises
                return self._refuse(f"{type(exc).__name__}: {exc}")
            if (original, replacement) not in self._made:
                self._made.append((original, replacement))
            report = PatchReport(self.target, replaced=tuple(replaced))
            if replaced:
                log.info("%s", report.summary())
            return report

    def _holder(self, module: object) -> tuple[object | None, str]:
        """What holds the function, and its name there: the module, or ``Class`` for ``Class.method``."""
        owner, _, attribute = self.name.rpartition(".")
        if not owner:
            return module, attribute
        holder = getattr(module, owner, None) if module is not None else None
        return (holder if isinstance(holder, type) else None), attribute

    def _rebind(self, old: object, new: object, *, all_or_nothing: bool) -> list[str]:
        """Bind ``new`` to every module-level name now bound to ``old`` itself; the names changed.

        ``all_or_nothing``: a binding that refuses undoes those already changed
        and raises :class:`_Unbindable` (a patch half-applied is worse than none).
        Otherwise (putting originals back) each binding that can change does.
        """
        changed: list[tuple[str, object, str]] = []
        for key, module, name in _bindings(old, _loaded()):
            try:
                setattr(module, name, new)
            except Exception as exc:  # a read-only module or object
                if all_or_nothing:
                    for _, done, done_name in changed:
                        with contextlib.suppress(Exception):
                            setattr(done, done_name, old)
                    raise _Unbindable(f"cannot rebind {key}.{name} ({type(exc).__name__}: {exc})") from None
                log.warning("%s: cannot restore %s.%s (%s)", self.target, key, name, exc)
                continue
            changed.append((key, module, name))
        return [f"{key}.{name}" for key, _, name in changed]

    def _refuse(self, why: str) -> PatchReport:
        report = PatchReport(self.target, refused=why)
        if not self._warned:
            self._warned = True
            log.warning("%s", report.summary())
        return report


class _Asking(threading.local):
    """The modules this thread's numapin hooks are asking the other finders for, now."""

    def __init__(self) -> None:
        self.names: set[str] = set()


_asking = _Asking()


class _Finder:
    """Finds nothing itself: lets the other finders find the module, then wraps its loader."""

    def __init__(self, patch: FunctionPatch) -> None:
        self.patch = patch
        #: What marks numapin's hooks, whichever copy of this module made them (a reload makes another class).
        self.numapin_target = patch.target

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname != self.patch.module or fullname in _asking.names:
            # Asked again while asking: another finder written like this one (it asks every finder of
            # sys.meta_path, this one included) would otherwise have the two call each other forever.
            return None
        _asking.names.add(fullname)
        try:
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                if find is None or getattr(finder, "numapin_target", None) is not None:
                    continue  # no numapin hook asks another: they would call each other
                spec = find(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            _asking.names.discard(fullname)
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            # Every numapin patch of this module, not only this hook's: the first hook asked wraps the loader,
            # and the others are never asked (it skips them, as they would skip it).
            patches: list[FunctionPatch] = []
            for finder in sys.meta_path:
                patch = getattr(finder, "patch", None) if getattr(finder, "numapin_target", None) else None
                if patch is not None and getattr(patch, "module", None) == fullname:
                    patches.append(patch)
            spec.loader = _PatchingLoader(spec.loader, patches or [self.patch])
        return spec


class _PatchingLoader:
    """The module's own loader, followed by the patches once the module's code has run."""

    def __init__(self, loader: Any, patches: list[FunctionPatch]) -> None:
        self._loader = loader
        self._patches = patches

    def create_module(self, spec: Any) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)  # the module's own errors are the importer's, as without numapin
        for patch in self._patches:
            if patch.installed:
                patch._patch(module)  # never raises: a failed patch must not fail the import

    def __getattr__(self, name: str) -> Any:
        # get_source, get_resource_reader, is_package...: whatever the real loader offers.
        return getattr(self._loader, name)
