"""JSON as the stores keep it in Valkey: text (the clients decode replies to ``str``), never pickle.
Shared by the task store's records and events and the legacy session store."""

from __future__ import annotations

from typing import Any, Final

import msgspec

_encoder: Final = msgspec.json.Encoder()
_decoder: Final = msgspec.json.Decoder()


def encode_json(value: Any) -> str:
    return _encoder.encode(value).decode()


def decode_json(text: str | bytes) -> Any:
    return _decoder.decode(text)
