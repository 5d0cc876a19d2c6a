"""Repository-root conftest: the HIL plugin itself is registered by the package's `pytest11`
entry point (`pip install -e .`); this file only keeps the checkout importable when someone
runs pytest without installing, by loading the plugin explicitly in that case."""

import importlib.metadata

_installed = any(ep.value == "harness.plugin"
                 for ep in importlib.metadata.entry_points(group="pytest11"))
pytest_plugins = [] if _installed else ["harness.plugin"]
