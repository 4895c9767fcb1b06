"""`agent-sre sim`: run the simulated Kubernetes cluster as an HTTP server."""

from __future__ import annotations

from pathlib import Path

import typer

from agent_sre.cli.common import get_settings

app = typer.Typer(no_args_is_help=True)


@app.callback()
def sim() -> None:
    """The simulated Kubernetes cluster (speaks the Kubernetes API)."""


@app.command()
def serve(
    host: str = typer.Option(None, help="interface to listen on [default: AGENT_SRE_SIM_HOST or 127.0.0.1]"),
    port: int = typer.Option(None, help="port to listen on [default: AGENT_SRE_SIM_PORT or 8480]", min=0,
                             max=65535),
    kubeconfig_out: Path = typer.Option(None, "--kubeconfig-out",
                                        help="write a kubeconfig for the default environment here "
                                             "[default: DATA_DIR/kubeconfig]"),
    speed: float = typer.Option(None, help="simulated seconds per real second [default: AGENT_SRE_SIM_SPEED]"),
    apps: str = typer.Option("shop", help="comma-separated apps installed in the default environment"),
    seed: int = typer.Option(0, help="random seed of the default environment"),
    clock: str = typer.Option(None, help="where the default environment's clock starts: wall (now: kubectl's own "
                                         "ages, as describe's events, are right at --speed 1) or fixed (2026-01-01, "
                                         "reproducible) [default: AGENT_SRE_SIM_CLOCK or wall]"),
) -> None:
    """Serve the Kubernetes API (default environment at the root, others under /envs/NAME) until Ctrl-C."""
    from agent_sre.simulator.server import serve_forever, write_kubeconfig
    from agent_sre.simulator.simulator import Simulator

    settings = get_settings()
    host = host or settings.sim_host
    port = settings.sim_port if port is None else port
    speed = settings.sim_speed if speed is None else speed
    if speed <= 0:
        raise typer.BadParameter("must be positive", param_hint="--speed")
    clock = clock or settings.sim_clock
    if clock not in ("wall", "fixed"):
        raise typer.BadParameter("must be wall or fixed", param_hint="--clock")
    kubeconfig_out = kubeconfig_out or settings.sim_kubeconfig
    simulator = Simulator(speed=speed, ledger=settings.data_dir.expanduser() / "sim" / "environments.json")
    app_names = [a.strip() for a in apps.split(",") if a.strip()]
    try:
        simulator.create_env("default", apps=app_names, seed=seed, clock=clock)
    except (KeyError, ValueError) as exc:
        raise typer.BadParameter(str(exc).strip("'\""), param_hint="--apps") from None
    summary = f"default environment: {', '.join(app_names) or 'no apps'}; speed {speed}x; clock {clock}"

    def ready(url: str) -> None:
        path = write_kubeconfig(kubeconfig_out, url, "agent-sre-sim")
        typer.echo(f"simulator: {url} ({summary})")
        typer.echo(f"kubeconfig: {path.resolve()}")

    try:
        serve_forever(simulator, host, port, on_ready=ready)
    except OSError as exc:
        typer.echo(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
        raise typer.Exit(1) from None
