"""`agent-sre codec`: the Temporal payload codec server (decoding for the UI and CLI) and key generation."""

from __future__ import annotations

import base64
import os
from urllib.parse import urlsplit

import typer

app = typer.Typer(help="Temporal payload encryption: the codec server the UI and CLI decode through; keys.",
                  no_args_is_help=True)


def ui_origins(ui_url: str) -> list[str]:
    """The Temporal UI's origin, and its `localhost` twin: browsers send whichever the user typed."""
    parts = urlsplit(ui_url)
    twins = {"127.0.0.1": "localhost", "localhost": "127.0.0.1"}
    origins = [f"{parts.scheme}://{parts.netloc}"]
    if parts.hostname in twins:
        origins.append(f"{parts.scheme}://{twins[parts.hostname]}:{parts.port}")
    return origins


@app.command("serve")
def serve(
    port: int | None = typer.Option(None, "--port", min=1, max=65535, help="default: settings.codec_port (8234)"),
    host: str = typer.Option("127.0.0.1", "--host", help="address to bind; anything wider needs a token"),
    origin: list[str] = typer.Option(None, "--origin", help="browser origin allowed to call it (repeatable); "
                                                            "default: the Temporal UI of the settings"),
) -> None:
    """Decode (and encode) payloads for the Temporal UI (`--ui-codec-endpoint`, or its Codec Server setting) and
    `temporal ... --codec-endpoint http://HOST:PORT`. The bearer token, when set, is AGENT_SRE_CODEC_TOKEN."""
    from aiohttp import web

    from agent_sre.codec import codec_app, payload_codec
    from agent_sre.config import get_settings

    settings = get_settings()
    codec = payload_codec(settings)
    if codec is None:
        typer.echo("error: AGENT_SRE_PAYLOAD_KEY is not set: payloads are not encrypted, there is nothing to decode",
                   err=True)
        raise typer.Exit(2)
    token = settings.codec_token.get_secret_value() if settings.codec_token else None
    if token is None and host not in ("127.0.0.1", "localhost", "::1"):
        typer.echo(f"warning: no AGENT_SRE_CODEC_TOKEN: anyone who reaches {host} can decrypt every payload",
                   err=True)
    origins = origin or ui_origins(settings.temporal_ui_url)
    port = port or settings.codec_port
    typer.echo(f"codec server on http://{host}:{port} (POST /decode, /encode) for {', '.join(origins)}")
    web.run_app(codec_app(codec, origins, token), host=host, port=port, print=None)


@app.command("keygen")
def keygen() -> None:
    """Print a new random AES-256 key, base64, for AGENT_SRE_PAYLOAD_KEY."""
    typer.echo(base64.b64encode(os.urandom(32)).decode())
