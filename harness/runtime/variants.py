"""Runtime variants: the runtime under test with a wrapper at its backend registry.

`--runtime-variant NAME` (ini `hil_runtime_variant`, environment `EXECUTORCH_HIL_RUNTIME_VARIANT`)
preloads `registry_wrapper.cpp`, built here against the runtime's own headers and libraries, into
every runner process (never into pytest), and tells it the variant in `HARNESS_RUNTIME_VARIANT`:

- `none` (the default): no wrapper, the runtime as it is.
- `stock`: the wrapper present and every call forwarded; a control that every verdict is the
  same as with no wrapper.
- `fix-model`: a model of upstream's "Isolate cached delegates by Module lifetime" (PR 24462),
  not its code: each Module's QNN delegates get a cache key of their own (the blob's context
  signature made unique per runtime allocator), a user count per handle, the real destroy at zero.
  It cannot run the destructor the real `destroy()` and a failed `init()` skip (they are inside
  the real backend), so those leaks stay.
- `fix-model-serialized`: the same, with whole executes kept apart from inits and destroys,
  stronger than the fix itself (which only locks the membership check inside execute).

The choice travels in the environment, as `--executorch-prefix` does, so every process of the
session (xdist workers, fork servers, replays) runs the same variant; a mutant
(`harness.runtime.mutants`) adds one injected defect on top of it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from harness.cache import cache_root, cached_build, digest
from harness.errors import ConfigError, HarnessError

VARIANTS = ("none", "stock", "fix-model", "fix-model-serialized")
ENV = "EXECUTORCH_HIL_RUNTIME_VARIANT"
"""The session's variant, for every process it starts (set by the plugin from the option)."""
WRAPPER_ENV = "HARNESS_RUNTIME_VARIANT"
"""What the wrapper itself reads in the runner process."""
MUTANT_ENV = "HARNESS_RUNTIME_MUTANT"
SOURCE = Path(__file__).with_name("registry_wrapper.cpp")
WRAPPER_PROJECT = Path(__file__).with_name("wrapper")
"""The same source as a CMake project, for builds whose compiler a toolchain file names (the
Android NDK's: harness.runner.builds.android.build_android_wrapper)."""
LIB_NAME = "libharness_registry_wrapper.so"

SEED_FIXES_PREFIX = "qnn-delegate-cache-"
"""The known issues the seed fixes: the delegate cache shared between Modules of one program
(its forced endings too). On a fix model their tests must be XPASS(strict), and nothing else
may change (scripts/variants_check.py, `harness matrix --runtime-variant`)."""


def fixed_by(variant: str, issue_id: str | None) -> bool:
    """Whether `variant` is meant to fix the known issue `issue_id`."""
    return variant.startswith("fix-model") and bool(issue_id) and \
        str(issue_id).startswith(SEED_FIXES_PREFIX)


DESCRIPTIONS = {
    "none": "the runtime as it is (no wrapper)",
    "stock": "the backend-registry wrapper forwarding every call (a control)",
    "fix-model": "a model of the seed's fix (per-Module cache keys, user counts; not upstream's "
                 "code)",
    "fix-model-serialized": "the model of the seed's fix with executes kept apart from inits and "
                            "destroys (stronger than the fix)",
}


class VariantError(HarnessError):
    """A runtime variant that cannot be built or applied."""


def check_variant(name: str) -> str:
    if name not in VARIANTS:
        raise ConfigError(f"--runtime-variant must be one of {', '.join(VARIANTS)}, not {name!r}")
    return name


def session_variant() -> str:
    """The variant of this session (the environment the plugin set), `none` by default."""
    return check_variant(os.environ.get(ENV) or "none")


def describe(name: str) -> str:
    return f"{name}: {DESCRIPTIONS[name]}"


def wrapper_command(output: Path, include: Path, lib_dir: Path, compiler: str) -> list[str]:
    """The compile line: the runtime's headers (its CMake package's EXECUTORCH_INCLUDE_DIRS: the
    include directory and the vendored c10 in it) and compile definitions
    (EXECUTORCH_COMPILE_DEFINITIONS), linked to its libexecutorch.so, `-z nodelete` so a dlclose of
    a backend library cannot unmap the wrapper its registry points at."""
    return [compiler, "-O2", "-std=c++17", "-shared", "-fPIC", "-Wall",
            "-DC10_USING_CUSTOM_GENERATED_MACROS", "-DET_EVENT_TRACER_ENABLED",
            f"-I{include}",
            f"-I{include / 'executorch' / 'runtime' / 'core' / 'portable_type' / 'c10'}",
            "-o", str(output), str(SOURCE),
            f"-L{lib_dir}", "-lexecutorch", f"-Wl,-rpath,{lib_dir}", "-Wl,-z,nodelete",
            "-ldl", "-lpthread"]


def build_wrapper(force: bool = False) -> Path:
    """The wrapper for the session's runtime on this host, built once per (source, runtime)."""
    from harness.runtime import current

    runtime = current()
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise VariantError("g++ is needed to build the backend-registry wrapper of "
                           "--runtime-variant: install it with `apt-get install g++`.")
    if not runtime.has_native_libraries or runtime.lib_dir is None:
        raise VariantError(f"--runtime-variant needs the runtime's shared libraries "
                           f"(libexecutorch.so); {runtime.describe()} has none")
    include = include_dir(runtime.cmake_prefix, runtime.path)
    return build_wrapper_for(compiler, include, runtime.lib_dir, runtime.describe(),
                             [runtime.version, runtime.git_revision or ""], force)


def build_wrapper_for(compiler: str, include: Path, lib_dir: Path, what: str,
                      identity: list[str], force: bool = False) -> Path:
    """The wrapper built by `compiler` against a runtime's headers (`include`) and libraries
    (`lib_dir`), cached by all of them and `identity` (version, revision); `what` names the
    runtime in an error. A cross compiler gives the wrapper of another runner build."""
    key = digest([SOURCE.read_bytes(), compiler, str(lib_dir), str(include), *identity])
    out_dir = cache_root() / "registry-wrapper" / key
    output = out_dir / LIB_NAME

    def build() -> str:
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp = out_dir / (LIB_NAME + ".tmp")
        proc = subprocess.run(wrapper_command(tmp, include, lib_dir, compiler),
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise VariantError(f"building the backend-registry wrapper against {what} "
                               f"failed:\n{proc.stderr[-3000:]}")
        tmp.replace(output)
        return ""

    cached_build(out_dir, [output], build, "backend-registry wrapper", force)
    return output


def include_dir(cmake_prefix: Path | None, path: Path | None) -> Path:
    """The `include` directory of a runtime's headers, under its CMake prefix or its path."""
    for base in (cmake_prefix, path):
        if base is not None and (Path(base) / "include" / "executorch" / "runtime" / "backend"
                                 / "interface.h").is_file():
            return Path(base) / "include"
    raise VariantError("the runtime under test ships no C++ headers "
                       "(include/executorch/runtime/backend/interface.h): the backend-registry "
                       "wrapper cannot be built against it")


def runner_environment(variant: str | None = None, mutant: str = "") -> dict[str, str]:
    """What a runner process needs for the variant: the wrapper preloaded (before any preload
    the environment already names) and the variant and mutant it reads. Empty for `none`."""
    variant = session_variant() if variant is None else check_variant(variant)
    if variant == "none":
        if mutant:
            raise VariantError("a mutant needs a runtime variant (stock or fix-model) to ride on")
        return {}
    wrapper = build_wrapper()
    preload = " ".join(p for p in (str(wrapper), os.environ.get("LD_PRELOAD", "")) if p)
    env = {"LD_PRELOAD": preload, WRAPPER_ENV: variant}
    if mutant:
        env[MUTANT_ENV] = mutant
    return env


def device_preload(workspace: PurePosixPath, runner_kind: str, where: str,
                   cross_build: Callable[[], Path] | None = None,
                   ) -> tuple[dict[Path, PurePosixPath], dict[str, str]]:
    """The wrapper's file (local -> device path) and run variables for a device workspace,
    empty for `none`. The host runner build (an x86_64 loopback phone, an x86_64 board) gets
    `build_wrapper`'s; another build gets `cross_build`'s (the arm64-linux build's wrapper against
    the aarch64 wheel, the Android build's with its NDK against its prefix), and a build without
    one is a VariantError naming the device (`where`). A backend mutant named in this process's
    environment (harness mutate sets it) travels with it: the device's runs do not inherit the
    controller's environment."""
    variant = session_variant()
    if variant == "none":
        return {}, {}
    if runner_kind != "host" and cross_build is None:
        raise VariantError(
            f"--runtime-variant {variant}: {where} runs the {runner_kind} runner build, for which "
            "the harness builds no backend-registry wrapper (it builds one for the host, "
            "arm64-linux and Android builds)")
    wrapper = build_wrapper() if runner_kind == "host" or cross_build is None else cross_build()
    on_device = workspace / LIB_NAME
    env = {"LD_PRELOAD": str(on_device), WRAPPER_ENV: variant}
    if os.environ.get(MUTANT_ENV):
        env[MUTANT_ENV] = os.environ[MUTANT_ENV]
    return {wrapper: on_device}, env
