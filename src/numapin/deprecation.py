"""Names that moved or were renamed: importable from their old place for one release, with a warning."""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["moved"]


def moved(module: str, name: str, renamed: Mapping[str, tuple[str, str]]) -> object:
    """What ``module.name`` used to be, found at its new place, with a :class:`DeprecationWarning`.

    ``renamed`` maps each old name to ``(new module, new name)``; any other
    name raises the AttributeError a module raises (a module's ``__getattr__``
    calls this).
    """
    try:
        where, new = renamed[name]
    except KeyError:
        raise AttributeError(f"module {module!r} has no attribute {name!r}") from None
    import importlib
    import warnings

    warnings.warn(f"{module}.{name} is deprecated and goes in the next release: use {where}.{new}",
                  DeprecationWarning, stacklevel=3)
    return getattr(importlib.import_module(where), new)
