"""`spacetools serve --backend ray`: the V1 tools as Ray actors, giving the results of worker processes."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest
import typer
from pydantic import ValidationError
from typer.testing import CliRunner

from spacetools.agent.policies.scripted import ScriptedPolicy
from spacetools.agent.rollout import run_episode
from spacetools.cli.serve import serve
from spacetools.tools.diagnostics import SleepTool
from spacetools.toolshed import ToolDeployment, Toolshed
from spacetools.toolshed.client import RemoteToolshed
from spacetools.toolshed.toolsets import V1, on_backend, with_profile


def test_on_backend_moves_the_worker_tools_and_keeps_their_shares() -> None:
    moved = on_backend(V1, "ray")
    assert [d.backend for d in moved] == ["ray"] * 6 + ["inprocess"]
    assert [(d.tool, d.instances, d.num_cpus) for d in moved] == [
        (d.tool, d.instances, d.num_cpus) for d in V1
    ]
    assert V1[0].backend == "process"  # the named tool set itself is left alone


def test_a_pool_cannot_scale_below_its_instances() -> None:
    with pytest.raises(ValidationError, match=r"max_instances \(2\) is below instances \(3\)"):
        ToolDeployment(tool=SleepTool, instances=3, max_instances=2)


def test_serve_rejects_an_address_without_the_ray_backend() -> None:
    app = typer.Typer()
    app.command()(serve)
    result = CliRunner().invoke(app, ["--address", "auto"])
    assert result.exit_code == 2 and "--address only applies with --backend ray" in result.output


@pytest.mark.slow
def test_serve_on_ray_runs_the_v1_tools_with_the_same_results_as_worker_processes(local_ray: None) -> None:
    import ray

    from spacetools.bench.dataset import episode_input
    from spacetools.bench.spatialsim.generator import generate

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = "import typer; from spacetools.cli.serve import serve; typer.run(serve)"
    arguments = ["--port", str(port), "--profile", "realistic", "--seed", "5", "--backend", "ray"]
    # The server joins the test's Ray as a second driver, as a server would join a cluster's head node.
    address = ray.get_runtime_context().gcs_address
    server = subprocess.Popen(
        [sys.executable, "-c", command, *arguments, "--address", address],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 240
        while True:
            assert server.poll() is None, server.communicate()[1].decode()[-2000:]
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            assert time.monotonic() < deadline, "spacetools serve --backend ray did not come up"
            time.sleep(0.5)
        stats = httpx.get(f"{url}/stats").json()["tools"]
        assert stats["depth_estimator"]["backend"] == "ray" and stats["vision_ops"]["backend"] == "inprocess"
        (sample,) = generate(1, seed=0, families=["bopgrasp"], workers=1)["bopgrasp"]
        task = episode_input(sample, "bopgrasp/0")

        async def both() -> list[Any]:
            async with (
                RemoteToolshed(url) as remote,
                Toolshed(with_profile("v1", "realistic"), seed=5) as local,
            ):
                return [await run_episode(ScriptedPolicy(), shed, task, seed=2) for shed in (remote, local)]

        remote, local = asyncio.run(both())
        metrics = httpx.get(f"{url}/metrics").text
    finally:
        server.terminate()
        log = server.communicate(timeout=60)[1].decode()
        assert "Application shutdown complete" in log, log[-2000:]
    assert [call.result_text for call in remote.tool_calls] == [call.result_text for call in local.tool_calls]
    assert [call.name for call in remote.tool_calls][-1] == "grasp_generator.compute_grasp"
    assert remote.finish_reason == "answer" and remote.answer == local.answer
    assert 'spacetools_toolshed_tool_calls_total{backend="ray",tool="grasp_generator"} 1.0' in metrics
