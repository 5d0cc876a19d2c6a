"""The interposer's ABI bridge, release by release, against a libQnnHtp.so that reads the union
of QnnHtpDevice_CustomConfig_t where each QAIRT release's library does (`htp_device_layout.c`).

Measured on the real x86_64 libraries of onnxruntime-qnn 2.3.0-2.7.0 with deviceCreate of one
SM8650 SOC config written at byte 4 and at byte 8 (the other offset fails with "Failed to set
scatter gather parameters: unknown custom config socModel 0"): the union did not move once and
for all, QAIRT 2.49 reads it at byte 4 again."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.qnn import interposer_build, sdk as sdk_module
from harness.qnn.trace import parse_trace

SOURCE = Path(__file__).with_name("htp_device_layout.c")

# QAIRT release: (core API, HTP backend API, the byte its libQnnHtp.so reads the union at).
MEASURED = {
    "2.47": ("2.36.0", "5.47.0", 8),
    "2.48": ("2.37.0", "5.48.0", 8),
    "2.49": ("2.38.0", "5.49.0", 4),
    "2.50": ("2.39.0", "5.50.0", 8),
    "2.51": ("2.40.0", "5.51.0", 8),
}


@pytest.fixture(scope="module")
def layout_bin(tmp_path_factory):
    """(the fake libQnnHtp.so, the executorch-1.5.1-laid-out caller)."""
    out = tmp_path_factory.mktemp("htp_layout")
    fake, caller = out / "libQnnHtp.so", out / "caller"
    for cmd in (["gcc", "-O2", "-Wall", "-DFAKE_HTP", "-shared", "-fPIC", "-o", str(fake), str(SOURCE)],
                ["gcc", "-O2", "-Wall", "-o", str(caller), str(SOURCE), "-ldl"]):
        built = subprocess.run(cmd, capture_output=True, text=True)
        assert built.returncode == 0, built.stderr
    return fake, caller


def create_device(layout_bin, tmp_path, core, backend, union_at, bridge="auto", configs="soc",
                  unload=None):
    """Run the caller through the interposer with the bridge settings a child process of the
    harness gets; returns (deviceCreate's rc, stderr, the trace's records). `unload` ("1" or
    "0", HARNESS_QNN_UNLOADABLE): the caller then closes the interposer and prints what stayed
    loaded (the last line of stderr's companion: see test_unload_*)."""
    fake, caller = layout_bin
    trace = tmp_path / "trace.txt"
    harness_env = sdk_module.discover().environment(trace, bridge)
    env = {k: v for k, v in harness_env.items() if k.startswith("HARNESS_QNN_")}
    env.update(HARNESS_QNN_REAL_HTP=str(fake), FAKE_HTP_CORE_API=core,
               FAKE_HTP_BACKEND_API=backend, FAKE_HTP_UNION_AT=str(union_at))
    argv = [str(caller), str(interposer_build.build_interposer()), configs]
    if unload is not None:
        env["HARNESS_QNN_UNLOADABLE"] = unload
        argv.append("unload")
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    rc = int(lines[0].removeprefix("rc="))
    if unload is not None:
        return rc, lines[1], parse_trace(trace.read_text())
    records = parse_trace(trace.read_text()) if trace.exists() else []
    return rc, proc.stderr, records


@pytest.mark.parametrize("qairt", sorted(MEASURED))
def test_each_release_gets_the_layout_its_library_reads(layout_bin, tmp_path, qairt):
    core, backend, union_at = MEASURED[qairt]
    rc, stderr, records = create_device(layout_bin, tmp_path, core, backend, union_at)
    assert rc == 0, stderr
    assert "socModel" not in stderr
    api = next(r for r in records if r.kind == "api")
    assert api.fields["core"] == core
    # executorch 1.5.1 writes the union at byte 4: re-laid exactly when the library reads byte 8.
    assert api.fields["bridge"] == ("1" if union_at == 8 else "0")
    device_create = next(r for r in records if r.kind == "device_create")
    assert device_create.fields["bridged"] == ("1" if union_at == 8 else "0")


def test_a_library_of_unknown_layout_is_refused_naming_its_version(layout_bin, tmp_path):
    rc, stderr, records = create_device(layout_bin, tmp_path, "2.41.0", "5.52.0", 8)
    assert rc != 0
    assert "core API 2.41.0" in stderr and "HTP backend API 5.52.0" in stderr
    assert "--qnn-abi-bridge" in stderr and "HTP_DEVICE_UNION_AT" in stderr
    assert "socModel" not in stderr  # the library was not handed a guess
    assert next(r for r in records if r.kind == "api").fields["bridge"] == "unknown"
    assert next(r for r in records if r.kind == "device_create").fields["layout"] == "unknown"
    # Without a custom config the layout does not matter: the call goes through.
    rc, stderr, _ = create_device(layout_bin, tmp_path, "2.41.0", "5.52.0", 8, configs="none")
    assert rc == 0, stderr


@pytest.mark.parametrize("bridge, qairt", [("off", "2.51"), ("on", "2.49")])
def test_forcing_the_bridge_is_obeyed_and_the_library_says_what_it_read(layout_bin, tmp_path,
                                                                        bridge, qairt):
    core, backend, union_at = MEASURED[qairt]
    rc, stderr, records = create_device(layout_bin, tmp_path, core, backend, union_at, bridge)
    assert rc == 14001
    assert "unknown custom config socModel 0" in stderr
    assert next(r for r in records if r.kind == "api").fields["bridge"] == {"on": "1", "off": "0"}[bridge]


def test_forced_on_a_library_of_unknown_version_is_relaid(layout_bin, tmp_path):
    """Forced on, a library of unknown version is re-laid (the user's word), not refused."""
    rc, stderr, _ = create_device(layout_bin, tmp_path, "2.41.0", "5.52.0", 8, "on")
    assert rc == 0, stderr


def test_the_interposer_goes_with_the_last_dlclose_where_the_library_can_unload(layout_bin,
                                                                               tmp_path):
    core, backend, union_at = MEASURED["2.51"]
    rc, resident, records = create_device(layout_bin, tmp_path, core, backend, union_at,
                                          unload="1")
    assert rc == 0
    assert resident == "interposer_resident=0 real_resident=0"
    kinds = [(r.kind, r.fields.get("pinned")) for r in records]
    assert kinds[0] == ("library_open", "0")
    assert ("library_close", None) in kinds
    device = next(r for r in records if r.kind == "device_create")
    assert device.fields["soc"] == "57"  # the SoC the caller asked for, read at its offset


def test_the_interposer_pins_both_where_the_real_library_stays(layout_bin, tmp_path):
    """HARNESS_QNN_UNLOADABLE=0 (the real library stays resident after dlclose, as QAIRT's
    x86_64 libQnnHtp.so does): a resident real library would answer the next dlopen by its
    soname, past the interposer, so the interposer stays too."""
    core, backend, union_at = MEASURED["2.51"]
    rc, resident, records = create_device(layout_bin, tmp_path, core, backend, union_at,
                                          unload="0")
    assert rc == 0
    assert resident == "interposer_resident=1 real_resident=1"
    assert records[0].kind == "library_open" and records[0].fields["pinned"] == "1"
    assert not any(r.kind == "library_close" for r in records)


def test_the_unload_probe_tells_a_library_that_leaves_from_one_that_stays(layout_bin):
    from harness.qnn.unload_probe import library_unloads

    fake, _ = layout_bin
    assert library_unloads(fake) is True
    real = sdk_module.discover()
    # QAIRT's x86_64 libQnnHtp.so keeps itself loaded after dlclose (measured 2.49, 2.51)
    assert real.library_unloads is False
    assert real.environment()["HARNESS_QNN_UNLOADABLE"] == "0"
