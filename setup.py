"""Everything is in pyproject.toml; this file only adds the start-up file to the wheel.

``numapin-startup.pth`` must sit at the top of site-packages (where Python's
``site`` module reads ``.pth`` files), not inside the package: build_py copies
it to the root of the build folder, which becomes the wheel's purelib root.
Editable installs do not carry it (setuptools maps only the package there).
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

STARTUP = "numapin-startup.pth"


class BuildPyWithStartup(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(os.path.join("src", STARTUP), os.path.join(self.build_lib, STARTUP), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, STARTUP)]


setup(cmdclass={"build_py": BuildPyWithStartup})
