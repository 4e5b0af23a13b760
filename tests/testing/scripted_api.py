"""What a scripted API client answers with (the unit tests replace ``ApiClient.call_api`` with a
handler of their own; no server): a response object as gpuq's request path reads it, and an RFC 7386
merge patch applied as the apiserver applies it, so a scripted server can keep the object it patches."""

from __future__ import annotations

import json
from typing import Any


class Response:
    """What ``call_api`` returns: a status and a JSON body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self._raw = json.dumps(body).encode()

    async def read(self) -> bytes:
        return self._raw

    def release(self) -> None:
        pass


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 section 2, as the apiserver applies it."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result
