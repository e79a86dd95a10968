"""Everything is in pyproject.toml; this file only adds the start-up file and the guides to the wheel.

``numapin-startup.pth`` must sit at the top of site-packages (where Python's
``site`` module reads ``.pth`` files), not inside the package: build_py copies
it to the root of the build folder, which becomes the wheel's purelib root.
Editable installs do not carry it (setuptools maps only the package there).
The guides (``docs/*.md``) go into the package as ``numapin/docs``, where
``numapin --help`` points a user who installed with pip and has no checkout.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

STARTUP = "numapin-startup.pth"


class BuildPyWithStartup(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(os.path.join("src", STARTUP), os.path.join(self.build_lib, STARTUP), preserve_mode=False)
        self.mkpath(os.path.join(self.build_lib, "numapin", "docs"))
        for name, target in self._guides():
            self.copy_file(os.path.join("docs", name), target, preserve_mode=False)

    def _guides(self) -> list[tuple[str, str]]:
        folder = "docs"
        names = sorted(n for n in os.listdir(folder) if n.endswith(".md")) if os.path.isdir(folder) else []
        return [(name, os.path.join(self.build_lib, "numapin", "docs", name)) for name in names]

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, STARTUP),
                *(target for _, target in self._guides())]


setup(cmdclass={"build_py": BuildPyWithStartup})
