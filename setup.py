"""Build steps pyproject.toml cannot declare (all other configuration is there).

The wheel ships device_configs/, models/ and tests/hil/ as harness/_data/ (the package-dir
mapping in pyproject.toml). Two adjustments:

- pytest's `--pyargs` does not resolve a namespace package, so the wheel gets `__init__.py`
  files that make harness/_data/tests/hil and its parents regular packages:
  `pytest --pyargs harness._data.tests.hil` runs the shipped suites. The checkout's tests/hil/
  stays without them.
- An editable install needs no mapping (harness/config/paths.py reads the checkout in place), so it
  leaves harness._data out and stays the plain `harness -> checkout/harness` install.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

DATA_PACKAGE = "harness._data"
WHEEL_ONLY_INITS = ("harness/_data", "harness/_data/tests", "harness/_data/tests/hil")


class BuildPy(build_py):
    def run(self):
        super().run()
        if self.editable_mode:
            return
        for package in WHEEL_ONLY_INITS:
            init = Path(self.build_lib, package, "__init__.py")
            init.parent.mkdir(parents=True, exist_ok=True)
            init.write_text('"""Created by the wheel build (setup.py)."""\n')


class EditableWheel(editable_wheel):
    def run(self):
        dist = self.distribution
        dist.packages = [p for p in dist.packages if not p.startswith(DATA_PACKAGE + ".")]
        dist.package_dir = {k: v for k, v in (dist.package_dir or {}).items()
                            if not k.startswith(DATA_PACKAGE + ".")}
        super().run()


setup(cmdclass={"build_py": BuildPy, "editable_wheel": EditableWheel})
