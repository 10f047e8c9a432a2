"""Unauthorized use is judged only on facts: never from device IDs that cannot be joined, never before a kubelet
List that started after the process was first seen."""

from __future__ import annotations

from tests.service.conftest import SCENARIOS


async def test_index_style_device_ids_degrade_attribution_instead_of_flagging_everyone(drive):
    driver = await drive(SCENARIOS / "demo.yaml", events=False)
    world = driver.world
    by_uuid = {device.uuid: str(n) for n, device in enumerate(world.node.device_uuids())}
    real_view = world._kubelet_view

    def index_view(tick):  # the device plugin with deviceIDStrategy=index
        return [(ns, name, [(c, r, [by_uuid[i.split("::")[0]] for i in ids]) for c, r, ids in containers])
                for ns, name, containers in real_view(tick)]

    world._kubelet_view = index_view
    world.sync()
    await driver.caught_up()
    kinds = set()
    for _ in range(60):  # past the scavenger's unauthorized start (tick 30) and its `for`
        snapshot = await driver.ticks(1)
        kinds |= {f.kind for f in snapshot.findings}
        assert not snapshot.attribution.kubelet_ok and not snapshot.attribution.healthy
    assert "unauthorized" not in kinds


async def test_a_new_process_is_held_back_until_a_later_list_confirms_it(drive):
    driver = await drive(SCENARIOS / "demo.yaml", events=False)
    scavenger_pids: set[int] = set()
    first = confirmed = None
    for _ in range(100):  # the scavenger starts at tick 30; a finding needs the pod 30 s old and 5 ticks
        snapshot = await driver.ticks(1)
        pids = {p.pid for p in driver.world.node.processes(snapshot.sample.tick) if p.pod == "scavenger-0"}
        scavenger_pids |= pids
        attributed = {pid for pid in pids if pid in snapshot.attribution.processes}
        if pids and first is None:
            first = snapshot.sample.tick
            assert not attributed  # first seen: no List has confirmed it yet
        elif pids and attributed and confirmed is None:
            confirmed = snapshot.sample.tick
        if any(f.kind == "unauthorized" for f in snapshot.findings):
            break
    assert first is not None and confirmed is not None and confirmed > first
    assert any(f.kind == "unauthorized" and f.culprit.name == "scavenger-0" for f in snapshot.findings)
