"""Small helpers for talking to the e2e API server the way gpuq's components do."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable

from kubernetes_asyncio.client.api_client import ApiClient
from kubernetes_asyncio.client.rest import ApiException

from gpuq_k8s.common.kube.status import call

#: Custom-object patches with a dict body go out as JSON-Patch unless told otherwise; status and
#: spec patches of CRs are merge patches. (kubernetes_asyncio accepts ``_content_type`` at run time
#: but its stubs do not declare it, hence the ``type: ignore[call-arg]`` at the call sites.)
MERGE_PATCH = "application/merge-patch+json"

_HEADER_CELL = re.compile(r"\S+(?: \S+)*")


def status_message(error: ApiException) -> str:
    """The ``message`` of the Status an API error carries (the API server's own words)."""
    body = error.body or "{}"
    return str(json.loads(body).get("message", ""))


async def ignore_not_found(call: Awaitable[object]) -> None:
    """Await a delete; a 404 (never created, e.g. after an earlier failure) is fine."""
    try:
        await call
    except ApiException as error:
        if error.status != 404:
            raise


def parse_table(output: str) -> list[dict[str, str]]:
    """Rows of kubectl's table output keyed by column header.

    Cells are cut at the header's column offsets rather than split on blanks, because empty cells
    (a printer column whose JSONPath is absent) would shift every later cell.
    """
    lines = [line for line in output.splitlines() if line.strip()]
    if not lines:
        return []
    columns = [(match.start(), match.group()) for match in _HEADER_CELL.finditer(lines[0])]
    rows = []
    for line in lines[1:]:
        cells = {}
        for index, (start, name) in enumerate(columns):
            end = columns[index + 1][0] if index + 1 < len(columns) else None
            cells[name] = line[start:end].strip()
        rows.append(cells)
    return rows


async def ensure_namespace(api: ApiClient, name: str) -> None:
    """Namespace ``name`` and its default ServiceAccount, created unless they exist."""
    for path, body in (
        ("/api/v1/namespaces", {"metadata": {"name": name}}),
        (f"/api/v1/namespaces/{name}/serviceaccounts", {"metadata": {"name": "default"}}),
    ):
        reply = await call(api, "POST", path, body)
        assert reply.ok or reply.status == 409, f"POST {path}: {reply.message}"
