"""A simulated clock with a wall-time epoch: reported times read as now (so `time() - …` alerts and dashboard panels
see a fresh sample), tick arithmetic stays relative. The epoch moves what is reported, never which tick it is.
"""

from __future__ import annotations

import pytest

from tests.testbed.test_sim_node import _gpm, pynvml, scenario
from watchdog.testbed import SimClock, SimulatedGpuNode

EPOCH = 1_790_000_000.5  # a wall time that is not a multiple of the tick


def test_now_is_epoch_plus_elapsed_and_listeners_hear_now():
    clock = SimClock(epoch=EPOCH)
    heard = []
    clock.subscribe(heard.append)
    assert (clock.now(), clock.elapsed()) == (EPOCH, 0.0)
    assert clock.advance(3) == EPOCH + 3 and heard == [EPOCH + 3]
    clock.set(10)  # set() counts simulated seconds, as advance() does
    assert (clock.elapsed(), clock.now()) == (10.0, EPOCH + 10)
    with pytest.raises(ValueError, match="epoch"):
        SimClock(epoch=-1)


def test_ticks_gpm_and_scheduled_xids_ignore_the_epoch():
    sims = [SimulatedGpuNode.from_scenario(scenario(xids=[{"at": 3, "gpu": 1, "xid": 48}]), SimClock(1.5, epoch=e))
            for e in (0.0, EPOCH)]
    readings = []
    for sim in sims:
        nvml = sim.nvml
        nvml.nvmlInit()
        events = nvml.nvmlEventSetCreate()
        nvml.nvmlDeviceRegisterEvents(nvml.nvmlDeviceGetHandleByIndex(1), pynvml.nvmlEventTypeXidCriticalError,
                                      events)
        mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(nvml.nvmlDeviceGetHandleByIndex(0), 0)
        gpm = _gpm(nvml, lambda s: nvml.nvmlGpmSampleGet(mig, s),
                   lambda s: (sim.clock.advance(2.0), nvml.nvmlGpmSampleGet(mig, s)),
                   [pynvml.NVML_GPM_METRIC_SM_UTIL])
        readings.append((sim.tick, gpm, nvml.nvmlEventSetWait_v2(events, 1).eventData))
        sim.close()
    assert readings[0] == readings[1] == (3, [(pynvml.NVML_SUCCESS, pytest.approx(100.0))], 48)
