"""One Module of a QNN-delegated program, with executorch's public Python API only: load the
program, load and execute `forward`, destroy it (QnnContext_free). Run it under valgrind's
memcheck to see QAIRT 2.49's use-after-free inside QnnContext_free (docs/valgrind.md):

    R=<dir with lib/x86_64-linux-clang/libQnnHtp.so ... of QAIRT 2.49 (onnxruntime-qnn 2.5.0)>
    QNN_SDK_ROOT=$R LD_LIBRARY_PATH=$R/lib/x86_64-linux-clang:<onnxruntime_qnn.libs> \
    PYTHONMALLOC=malloc valgrind --tool=memcheck --num-callers=40 \
        "$(python -c 'import sys; print(sys.executable)')" qnn_context_free_under_valgrind.py PROGRAM.pte

PROGRAM.pte: a program lowered to QNN HTP (SM8650) by the QAIRT 2.49 libraries (a program
compiled by newer ones fails to load: "Using newer context binary on old SDK"). valgrind must
start the interpreter itself, not a wrapper script (pyenv's shim is a bash script).
"""

import gc
import sys

import torch
from executorch.extension.pybindings import _C

program = _C._load_program(sys.argv[1])
forward = program.load_method("forward")
print(forward.call([torch.ones(1, 16)]), flush=True)
del forward, program
gc.collect()  # ~Method -> the QNN backend's destroy -> QnnContext_free
print("destroyed", flush=True)
