"""Encryption of every Temporal payload, and the codec server that lets those allowed read them.

Temporal keeps each workflow's inputs, activity results, signals and queries in its history: raw tool outputs,
decoded Secrets, the incident's diagnosis. Whoever can read the history (the UI, `temporal workflow show`, the
server's database, its backups) would read them. With `AGENT_SRE_PAYLOAD_KEY` set, the data converter of every
client and worker (`agent_sre.temporal.data_converter`) seals each payload with AES-256-GCM before it leaves the
process, so the server only ever stores ciphertext; failure messages and stack traces travel as encoded
attributes, sealed too.

A sealed payload names its key by id (`encryption-key-id`, a hash prefix that gives nothing of the key away), so
keys can rotate: the current key seals, and `AGENT_SRE_PAYLOAD_OLD_KEYS` still opens what older keys sealed.
Payloads that are not sealed (histories written before encryption was turned on, or by the dev stack) pass through
untouched, so old workflows replay. The Temporal UI and CLI decode through `agent-sre codec serve`, which speaks
Temporal's remote codec protocol (`POST /decode`, `POST /encode`) behind an optional bearer token.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Awaitable, Callable, Collection, Sequence

from aiohttp import web
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.converter import PayloadCodec

from agent_sre.config import Settings

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
NONCE_BYTES = 12  # GCM's standard nonce; random per payload (2^32 payloads per key keep collisions negligible)


class PayloadKeyError(ValueError):
    """A sealed payload that none of the configured keys opens."""


def key_id(key: bytes) -> str:
    """The name a key goes by in payload metadata: 16 hex digits of its SHA-256."""
    return hashlib.sha256(key).hexdigest()[:16]


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over each serialized payload. `keys[0]` seals; every key opens what it sealed."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys:
            raise ValueError("an encryption codec needs at least one key")
        self._keys = {key_id(k): AESGCM(k) for k in keys}
        self._current = key_id(keys[0])

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.seal(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.open(p) for p in payloads]

    def seal(self, payload: Payload) -> Payload:
        """The payload, serialized and encrypted; its key id is also the authenticated data, so a payload cannot
        be relabelled to another key."""
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._keys[self._current].encrypt(nonce, payload.SerializeToString(), self._current.encode())
        return Payload(metadata={"encoding": ENCODING, KEY_ID: self._current.encode()}, data=nonce + sealed)

    def open(self, payload: Payload) -> Payload:
        """The original payload; one that was never sealed as it is."""
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        kid = payload.metadata.get(KEY_ID, b"").decode()
        aes = self._keys.get(kid)
        if aes is None:
            raise PayloadKeyError(
                f"payload sealed with key {kid!r}, which no configured key has (current {self._current!r}, "
                f"all {sorted(self._keys)}): set AGENT_SRE_PAYLOAD_KEY, or list the retired key in "
                "AGENT_SRE_PAYLOAD_OLD_KEYS")
        try:
            plain = aes.decrypt(payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:], kid.encode())
        except InvalidTag:
            raise PayloadKeyError(f"payload sealed with key {kid!r} fails authentication: it was altered, or "
                                  "a different key has the same id") from None
        return Payload.FromString(plain)


def payload_codec(settings: Settings) -> EncryptionCodec | None:
    """The codec the settings ask for; None when no key is configured (payloads stay plain)."""
    keys = settings.payload_keys
    return EncryptionCodec(keys) if keys else None


Transform = Callable[[Sequence[Payload]], Awaitable[list[Payload]]]
ALLOWED_HEADERS = "content-type, x-namespace, authorization"


def codec_app(codec: PayloadCodec, origins: Collection[str], token: str | None = None) -> web.Application:
    """Temporal's remote codec endpoints: `POST /decode` and `POST /encode` take and return `{"payloads": [...]}`
    (Payloads in proto JSON). Browsers at `origins` (the Temporal UI) may call them; with `token` set, a request
    must carry `Authorization: Bearer <token>` (the UI's "pass access token", the CLI's `--codec-auth`)."""

    def cors(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        if origin is not None and origin in origins:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Vary"] = "Origin"
            response.headers["Access-Control-Allow-Methods"] = "POST, OPTIONS"
            response.headers["Access-Control-Allow-Headers"] = ALLOWED_HEADERS
            response.headers["Access-Control-Allow-Credentials"] = "true"
        return response

    def authorized(request: web.Request) -> bool:
        if token is None:
            return True
        return hmac.compare_digest(request.headers.get("Authorization", "").encode(), f"Bearer {token}".encode())

    def endpoint(transform: Transform) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            if not authorized(request):
                return cors(request, web.json_response({"error": "unauthorized"}, status=401))
            try:
                payloads = json_format.Parse(await request.read(), Payloads())
                result = Payloads(payloads=await transform(payloads.payloads))
            except (json_format.ParseError, PayloadKeyError) as exc:
                return cors(request, web.json_response({"error": str(exc)}, status=400))
            return cors(request, web.Response(text=json_format.MessageToJson(result), content_type="application/json"))
        return handle

    async def preflight(request: web.Request) -> web.StreamResponse:
        return cors(request, web.Response())

    app = web.Application()
    app.add_routes([web.post("/decode", endpoint(codec.decode)), web.post("/encode", endpoint(codec.encode)),
                    web.options("/decode", preflight), web.options("/encode", preflight)])
    return app
