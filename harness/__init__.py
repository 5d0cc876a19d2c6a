"""Hardware-in-the-loop test framework for ExecuTorch's Qualcomm (QNN) backend.

The library drives load / execute / unload / destroy orderings of ExecuTorch modules in fresh
processes, on Android devices over adb or on the QNN HTP simulator, and checks what the QNN
call trace, the outputs and the process memory say after each step. The pytest plugin lives in
`harness.plugin`.
"""

__version__ = "0.1.0"
