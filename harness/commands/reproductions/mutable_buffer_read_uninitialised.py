"""The QNN delegate reads its delegated mutable buffer before anything wrote it: the first
execute computes on whatever bytes malloc left in the buffer.

    python mutable_buffer_read_uninitialised.py             # exit 1 while the bug is present
    python mutable_buffer_read_uninitialised.py --control   # the buffer held by the runtime: 0
    python mutable_buffer_read_uninitialised.py --valgrind  # memcheck's report of the read

The program is an accumulator (`acc.add_(x); return acc * 1.0`, a 16-float buffer starting at
linspace(1.0, 2.5), x = 0.5) with the buffer inside the QNN delegate (the lowering's default,
skip_mutable_buffer=False). QnnManager::AllocateTensor gives each such buffer memory of its own
with TensorWrapper::AllocateDataBuffer, `new (std::nothrow) char[bytes_]`, and nothing writes it
before the first QnnGraph_execute reads it as the graph's input.

The C++ program (cpp/module_repro.cpp, executorch's Module) loads the program and executes
`forward` once, twice, with glibc's malloc told to fill every allocation with a known byte
(GLIBC_TUNABLES glibc.malloc.perturb, tcache off so every malloc goes through it): 0x3f in one
run, 0x40 in the other. An initialised buffer gives the same first output in both runs; the
bug gives, in every element, the float whose four bytes are the fill plus x: 0.747 + 0.5 and
3.004 + 0.5. The control is the same accumulator lowered with skip_mutable_buffer=True (the
runtime holds the buffer, whose initial value the program carries): its first output is
linspace(1.0, 2.5) + 0.5 whatever the fill.

--valgrind runs the first execute under valgrind's memcheck with --track-origins=yes: libQnnHtp
branches on values "created by a heap allocation" at `operator new[](unsigned long,
std::nothrow_t const&)` called from libexecutorch_backend_qnn.so under BackendDelegate::Init
(the QNN runtime's only nothrow new[]: TensorWrapper.cpp, AllocateDataBuffer).
"""

import struct
import sys

from common import input_file, native, program, report, signal_name, valgrind, describe_error

FILLS = (0x3F, 0x40)  # glibc fills each allocation with (perturb byte ^ 0xff)
TOLERANCE = 0.01  # fp16 HTP


def first_output(name: str, fill: int) -> list[float] | None:
    tunables = f"glibc.malloc.tcache_count=0:glibc.malloc.perturb={fill ^ 0xFF}"
    status, out, err = native("execute-once", program(name), input_file(name),
                              env={"GLIBC_TUNABLES": tunables})
    found = [l for l in out.splitlines() if l.startswith("forward:")]
    if status != 0 or not found:
        print(f"could not tell: module_repro ended with {signal_name(status)}:\n{out}\n"
              f"{err[-3000:]}")
        return None
    return [float(v) for v in found[-1].split()[1:]]


def as_float(fill: int) -> float:
    return struct.unpack("<f", bytes([fill] * 4))[0]


def with_fills(name: str) -> int:
    outputs = {fill: first_output(name, fill) for fill in FILLS}
    if any(v is None for v in outputs.values()):
        return 2
    x = 0.5
    follows = all(abs(v - (as_float(fill) + x)) <= TOLERANCE * max(1.0, abs(as_float(fill)))
                  for fill in FILLS for v in outputs[fill])
    same = all(abs(p - q) <= TOLERANCE for p, q in zip(*outputs.values()))
    shown = "; ".join(f"malloc fill 0x{fill:02x} (as a float {as_float(fill):.4g}): first "
                      f"output {[round(v, 4) for v in outputs[fill][:4]]}..."
                      for fill in FILLS)
    if not follows and not same:
        print(f"could not tell: the first output depends on the fill but is not fill + x: {shown}")
        return 2
    return report(follows, f"{name}'s first execute computes from the buffer's initial state "
                  "(the same output whatever malloc left in the memory)", shown)


def under_memcheck(name: str) -> int:
    _status, out, errors = valgrind("memcheck", "execute-once", program(name), input_file(name),
                                    extra=("--track-origins=yes",))
    if "forward:" not in out:
        print(f"could not tell: the program did not execute under valgrind:\n{out[-3000:]}")
        return 2
    origin = "Uninitialised value was created by a heap allocation"

    def from_buffer(error: dict) -> bool:
        if not error["kind"].startswith("Uninit"):
            return False
        for words, stack in error["parts"]:
            if words.startswith(origin) and stack and stack[0].startswith(
                    "operator new[](unsigned long, std::nothrow_t const&)") and any(
                    "[libexecutorch_backend_qnn.so]" in f for f in stack[1:3]) and any(
                    f.startswith("executorch::runtime::BackendDelegate::Init") for f in stack):
                return True
        return False

    found = [e for e in errors if from_buffer(e)]
    in_qnn = [e for e in found if e["parts"][0][1][:1] and
              e["parts"][0][1][0].endswith("[libQnnHtp.so]")]
    shown = (f"{len(found)} memcheck errors on values from the delegate's nothrow new[] "
             f"({len(in_qnn)} inside libQnnHtp.so, the graph reading its input)")
    if found:
        print("memcheck's report (the first of them):\n" + describe_error((in_qnn or found)[0], 16))
    return report(bool(found), "memcheck reports no use of the never-written buffer", shown)


def main() -> int:
    if "--valgrind" in sys.argv:
        return under_memcheck("stateful_accumulator")
    return with_fills("stateful_accumulator_rt" if "--control" in sys.argv
                      else "stateful_accumulator")


if __name__ == "__main__":
    sys.exit(main())
