"""Programs: from a model file or a user's `.pte` to a program the runners load (reading `.pte`
files, the model registry, compiling, inputs and references). See docs/architecture.md.
"""
