"""`--format cpp`: the scenario as a C++ test against `executorch::extension::Module`.

The directory holds `test_<scenario>.cpp` (a plain `main` with one call per step of the
ordering; templates/standalone.cpp holds what each step does, as the native runner does it:
what a step refuses before the runtime sees it, destroy as unloading every method in load
order and then resetting the `Module`), a `CMakeLists.txt` that builds it against an installed ExecuTorch
(`find_package(executorch)`) with the native runner's flags (harness/runner/native/
CMakeLists.txt: the package's C++ standard and compile definitions, its libraries and the QNN,
XNNPACK and optimized-kernel components, the runtime library directory as rpath), the
programs and tensors in `data/`, and `run.sh` (configure, build, run).
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.export.plan import Plan, identifier
from harness.export.run_script import write_run_script
from harness.export.source import Language, fill, tensors

TEMPLATE = Path(__file__).with_name("templates") / "standalone.cpp"
DTYPES = {"float32": "Float", "float16": "Half", "bfloat16": "BFloat16", "float64": "Double",
          "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char",
          "uint64": "UInt64", "uint32": "UInt32", "uint16": "UInt16", "uint8": "Byte",
          "bool": "Bool"}  # every dtype of harness.protocol.scenario_file.DTYPES

CMAKE = """# Builds test_{scenario} against an installed ExecuTorch, with the flags of
# executorch-qnn-hil's native runner:
#   cmake -S . -B build -G Ninja -DCMAKE_PREFIX_PATH=<site-packages>/executorch
#   cmake --build build
# (the executorch wheel's CMake package needs CMake >= 3.28: pip install 'cmake>=3.28' ninja)
cmake_minimum_required(VERSION 3.28)
project(test_{scenario} LANGUAGES CXX)
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE Release)
endif()
find_package(executorch CONFIG REQUIRED)
find_package(Threads REQUIRED)
add_executable(test_{scenario} test_{scenario}.cpp)
if(DEFINED EXECUTORCH_CXX_STANDARD AND EXECUTORCH_CXX_STANDARD)
  set(_standard ${{EXECUTORCH_CXX_STANDARD}})
else()
  set(_standard 17)
endif()
set_target_properties(test_{scenario} PROPERTIES CXX_STANDARD ${{_standard}}
                      CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
target_include_directories(test_{scenario} PRIVATE ${{EXECUTORCH_INCLUDE_DIRS}})
target_compile_definitions(test_{scenario} PRIVATE ${{EXECUTORCH_COMPILE_DEFINITIONS}}
                           C10_USING_CUSTOM_GENERATED_MACROS)
target_compile_options(test_{scenario} PRIVATE -Wall -Wextra -Wno-unused-parameter)
set(_libs ${{EXECUTORCH_LIBRARIES}})
foreach(_component backend_qnn backend_xnnpack kernels_optimized)
  if(TARGET executorch::${{_component}})
    list(APPEND _libs executorch::${{_component}})
  endif()
endforeach()
list(REMOVE_DUPLICATES _libs)
target_link_libraries(test_{scenario} PRIVATE ${{_libs}} Threads::Threads ${{CMAKE_DL_LIBS}})
if(EXECUTORCH_RUNTIME_LIBRARY_DIR)
  get_filename_component(_lib_dir "${{EXECUTORCH_RUNTIME_LIBRARY_DIR}}" REALPATH)
  set_target_properties(test_{scenario} PROPERTIES BUILD_WITH_INSTALL_RPATH ON
                        INSTALL_RPATH "${{_lib_dir}}")
endif()
"""

BUILD = """# ExecuTorch's CMake package: EXECUTORCH_PREFIX, else the installed executorch wheel's.
prefix="${{EXECUTORCH_PREFIX:-$("$PYTHON" -c 'import importlib.util as u; print(u.find_spec("executorch").submodule_search_locations[0])')}}"
CMAKE="${{CMAKE:-{cmake}}}"
command -v "$CMAKE" >/dev/null || CMAKE=cmake
generator=()
NINJA="${{NINJA:-{ninja}}}"
command -v "$NINJA" >/dev/null && generator=(-G Ninja -DCMAKE_MAKE_PROGRAM="$(command -v "$NINJA")")
build="${{BUILD_DIR:-$here/build}}"
"$CMAKE" -S "$here" -B "$build" "${{generator[@]}}" -DCMAKE_BUILD_TYPE=Release \\
  -DCMAKE_PREFIX_PATH="$prefix" > "$build.log" 2>&1 || {{ cat "$build.log"; exit 2; }}
"$CMAKE" --build "$build" >> "$build.log" 2>&1 || {{ cat "$build.log"; exit 2; }}
repeat "$build/test_{scenario}" "$data"
"""  # noqa: E501 (a shell script: the prefix look-up is one command)


def _literal(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a C string literal (the names are ASCII)
    if isinstance(value, tuple):  # tensors
        return tensors(value, lambda t: f'{{"{t.file}", ScalarType::{DTYPES[t.dtype]}, '
                                        f'{{{", ".join(map(str, t.shape))}}}}}', "{}")
    return repr(value)


def _parallel(subs: list[tuple[str, str]]) -> list[str]:
    return (["parallel({"] + [f"    {{{_literal(d)}, [&] {{ {c}; }}}}," for d, c in subs] +
            ["});"])


def render(plan: Plan) -> str:
    taken: set[str] = set()
    var = {m: identifier(m, taken) for m in plan.modules}
    lang = Language("//", ";", "  ", _literal, var.__getitem__, _parallel)
    declarations = "\n".join(f"  Live {var[m]}{{{_literal(m)}, {{}}, nullptr, {{}}}};"
                             for m in plan.modules)
    # The rules ride in the program (the interposer's grammar has no quotes or backslashes).
    nemesis = "{" + ", ".join(_literal(rule) for rule in plan.nemesis) + "}"
    return fill(TEMPLATE, plan, "C++", lang, DECLARATIONS=declarations, NEMESIS=nemesis)


def export_cpp(plan: Plan, out: Path, data: str = "data", copy_data: bool = True) -> Path:
    """Write the C++ export into `out`; `data` is the data directory relative to it."""
    from harness.runner.builds.tools import build_tools

    out.mkdir(parents=True, exist_ok=True)
    (out / f"test_{plan.scenario}.cpp").write_text(render(plan))
    (out / "CMakeLists.txt").write_text(CMAKE.format(scenario=plan.scenario))
    if copy_data:
        plan.copy_data(out / data)
    cmake, ninja = build_tools()
    body = BUILD.format(scenario=plan.scenario, cmake=cmake, ninja=ninja)
    write_run_script(out / "run.sh", f"Builds and runs the C++ test of scenario {plan.scenario} "
                     "against the installed ExecuTorch.", plan.scenario, plan.ordering, body, data,
                     plan.nemesis, plan.launch)
    (out / "README.md").write_text(
        f"# HIL scenario {plan.scenario} as a C++ test\n\n"
        f"Ordering: {plan.ordering}\n\n"
        f"`test_{plan.scenario}.cpp` performs it against `executorch::extension::Module` and "
        "asserts what the framework asserted (each step's status, outputs equal to the "
        "reference and to the first execute of the same method, and with the QNN trace "
        "interposer one live context per module with a loaded method). Build and run:\n\n"
        "```bash\nbash run.sh            # exit 1 when a check fails, 2 when it does not build\n```\n\n"
        "By hand: `cmake -S . -B build -G Ninja -DCMAKE_PREFIX_PATH=<site-packages>/executorch "
        f"&& cmake --build build && build/test_{plan.scenario} data` with `QNN_SDK_ROOT` and "
        "`LD_LIBRARY_PATH` naming the QNN libraries.\n"
        + ("\n" + plan.launch_note.replace(
            "COMMAND", plan.launched(f"build/test_{plan.scenario} data")) if plan.launch else ""))
    return out
