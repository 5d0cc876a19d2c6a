"""Where the project's data lives: device configs, models and the HIL suites.

In a source checkout (plain or `pip install -e .`) they are the repository's top-level
`device_configs/`, `models/` and `tests/hil/`, beside `harness/`. A wheel cannot install
top-level directories like those, so it ships them inside the package as `harness/_data/`
(see pyproject.toml). Every module finds them here instead of next to its own source, so the
harness works from any project it is installed into.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parents[1]
_SHIPPED = _PACKAGE_DIR / "_data"

# What a child process needs on PYTHONPATH to `import harness`: the checkout or site-packages.
PACKAGE_PARENT = _PACKAGE_DIR.parent

# A checkout has device_configs/ beside harness/; an installed wheel has harness/_data/, which
# wins, so a stray site-packages/device_configs/ of some other distribution cannot take over.
DATA_ROOT = (PACKAGE_PARENT if (PACKAGE_PARENT / "device_configs").is_dir() and not _SHIPPED.is_dir()
             else _SHIPPED)

CONFIG_DIR = DATA_ROOT / "device_configs"
MODELS_DIR = DATA_ROOT / "models"
SUITES_DIR = DATA_ROOT / "tests" / "hil"

# True in a checkout (editable or plain), where the project's own framework tests exist too.
IN_CHECKOUT = DATA_ROOT == PACKAGE_PARENT
