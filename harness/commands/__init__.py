"""Commands of `python -m harness` that need more of the stack than one package: validating
every kind of config file (`configs.py`), and the runtime matrix (`matrix.py`). The CLI
(`harness/__main__.py`) dispatches to them; nothing below imports them.
"""
