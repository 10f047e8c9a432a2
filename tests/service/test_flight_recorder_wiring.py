"""`run` with the flight recorder on: the agent's ticks land in rotating segments and their counters are exported."""

from pathlib import Path

from tests.service.test_service_pipeline import SCENARIOS, scrape
from watchdog.trace import read_trace
from watchdog.trace.flight import segments


async def test_the_agent_records_its_ticks_and_exports_the_counters(drive, tmp_path: Path) -> None:
    directory = tmp_path / "flight"
    driver = await drive(SCENARIOS / "demo.yaml", flight_recorder={"enabled": True, "directory": str(directory)})
    await driver.ticks(4)
    body = await scrape(driver.agent.port)
    driver.agent.flight_recorder.close()
    [segment] = segments(directory)
    assert [record.tick for record in read_trace(segment)] == [0, 1, 2, 3]
    node = driver.agent.node
    assert f'gpu_watchdog_flight_recorder_ticks_total{{node="{node}"}} 3' in body  # the snapshot before tick 3's
    assert f'gpu_watchdog_flight_recorder_segments{{node="{node}"}} 1' in body
    assert f'gpu_watchdog_flight_recorder_dropped_ticks_total{{node="{node}"}} 0' in body
    assert "gpu_watchdog_flight_recorder_written_bytes_total" in body
