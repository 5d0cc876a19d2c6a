"""The device config files' schemas: what `device_configs/socs/<SOC>.yaml`,
`device_configs/simulator.yaml` and a farm file may say, as strict pydantic models
(`harness.config.schema`); `harness.config` reads a file with them into what the rest of the
harness uses (SocConfig, SimulatorConfig).

Its own module so that pydantic and PyYAML are imported only when a file is really read: a
session whose configs were read before gets their values from the harness cache
(`harness.config.remembered`), without building these models.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from harness.config.schema import StrictModel


# -- file schemas ---------------------------------------------------------------------------------

class SocMemory(StrictModel):
    # Process Rss growth tolerated across a destroy-everything / reload cycle.
    rss_leak_kb: int = Field(ge=0)
    # dma-buf (HTP shared and spill-fill buffers) expected per live QNN context.
    htp_context_kb: int = Field(0, ge=0)
    # DSP heap (QNN's DSP memory profiling, phones only) allowed per live QNN context above
    # the heap before the first context, and how far above that baseline it may stay once no
    # context is live.
    dsp_heap_context_kb: int = Field(32768, ge=0)
    dsp_heap_leak_kb: int = Field(256, ge=0)
    # Growth per load -> execute -> destroy cycle a soak tolerates (harness.results.soak: the
    # Theil-Sen slope over the cycles after the warm-up): of Rss, and of malloc's bytes in use.
    soak_rss_kb_per_cycle: float = Field(64, ge=0)
    soak_heap_bytes_per_cycle: float = Field(1024, ge=0)


class SocTimeouts(StrictModel):
    runner_s: float = Field(120, gt=0)


class SocConfigFile(StrictModel):
    """`device_configs/socs/<SOC>.yaml`."""

    soc: str = Field(min_length=1)
    name: str = ""
    htp_arch: int = Field(gt=0)
    vtcm_mb: int = Field(gt=0)
    # `ro.board.platform` code names of the SoC, for devices whose ro.soc.model is empty.
    board_platforms: list[str] = []  # noqa: RUF012 (pydantic copies a field default)
    memory: SocMemory
    timeouts: SocTimeouts = SocTimeouts()


class SimulatorMemory(StrictModel):
    rss_leak_kb: int = Field(ge=0)


class SimulatorTimeouts(StrictModel):
    runner_s: float = Field(300, gt=0)


class SimulatorConfigFile(StrictModel):
    """`device_configs/simulator.yaml`."""

    kind: Literal["simulator"]
    default_soc: str = Field(min_length=1)
    memory: SimulatorMemory
    timeouts: SimulatorTimeouts = SimulatorTimeouts()


class FarmDevice(StrictModel):
    serial: str = Field(min_length=1)
    soc: str | None = None  # overrides what the device reports


class FarmFile(StrictModel):
    """`device_configs/farms/*.yaml` (or any `--farm` file)."""

    adb_server: str | None = None
    devices: list[FarmDevice] = Field(min_length=1)
