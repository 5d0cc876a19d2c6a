"""Reports people look at: JUnit properties, the `--hil-report` page and results.json. See
docs/architecture.md.
"""
