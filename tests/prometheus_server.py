"""A real Prometheus for tests, and a tiny HTTP target for it to scrape.

Several test modules need the same thing: Debian's Prometheus on a free port with a one-target scrape config, an
aiohttp app serving the series the test controls, and both stopped whatever the test did. One copy lives here.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable, Iterator, Mapping

from aiohttp import web


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.asynccontextmanager
async def serving(routes: Mapping[str, Callable[[web.Request], Awaitable[web.StreamResponse]]]) -> AsyncIterator[int]:
    """An HTTP server on a free port answering GET ``path`` with ``routes[path]``; yields its port."""
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield port
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def serving_metrics(body: Callable[[], str]) -> AsyncIterator[int]:
    """An HTTP server answering ``/metrics`` with ``body()`` on every request; yields its port."""

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(text=body())

    async with serving({"/metrics": metrics}) as port:
        yield port


@contextlib.contextmanager
def prometheus(
    tmp_path: Path,
    *,
    target_port: int | None,
    job: str = "app",
    honor_labels: bool = True,
    scrape_interval: str = "1s",
    data: Path | None = None,
) -> Iterator[str]:
    """Prometheus scraping ``127.0.0.1:target_port`` (nothing when None), storing in ``data`` (default a fresh
    folder); yields its URL and stops it afterwards."""
    scrape = "scrape_configs: []\n"
    if target_port is not None:
        scrape = (f"scrape_configs:\n  - job_name: {job}\n    honor_labels: {str(honor_labels).lower()}\n"
                  f"    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n")
    config = tmp_path / "prometheus.yml"
    config.write_text(f"global: {{scrape_interval: {scrape_interval}, evaluation_interval: {scrape_interval}}}\n"
                      + scrape)
    port = free_port()
    process = subprocess.Popen(
        [shutil.which("prometheus") or "/usr/bin/prometheus", f"--config.file={config}",
         f"--storage.tsdb.path={data or tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)
