"""AdmissionReview parsing and response building (``admission.k8s.io/v1``).

The body is decoded with orjson (several times faster than the json module or pydantic's own
parser on a 3 KB Pod review, which is most of a review's cost besides TLS) and the envelope is then
validated with pydantic; the reviewed object stays a plain JSON dict, because the rules in
:mod:`common.model` parse API JSON themselves and a second, typed copy of a whole Pod per request
would only cost time. A body orjson refuses (not JSON, or JSON it does not take: integers beyond 64
bits, ``NaN``) goes through pydantic's JSON parser, so the answer never depends on which parser ran.

A body that is not an AdmissionReview raises :class:`MalformedReview`, which the server turns into an
HTTP 400 with a one-line reason (design.md, "Webhook endpoints"): never a 500.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import orjson
import pydantic
import pydantic_core

API_VERSIONS: Final = frozenset({"admission.k8s.io/v1", "admission.k8s.io/v1beta1"})
KIND: Final = "AdmissionReview"
Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]

#: One JSONPatch operation (RFC 6902), as sent to the apiserver.
PatchOp = dict[str, Any]


class MalformedReview(Exception):
    """The body is not a usable AdmissionReview; ``str(err)`` is a one-line reason."""


class GroupVersionKind(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="ignore", frozen=True)

    group: str = ""
    version: str = ""
    kind: str


class AdmissionRequest(pydantic.BaseModel):
    """The fields of ``request`` gpuq decides on; everything else is ignored."""

    model_config = pydantic.ConfigDict(extra="ignore", populate_by_name=True)

    uid: str = pydantic.Field(min_length=1)
    kind: GroupVersionKind
    name: str = ""
    namespace: str = ""
    operation: Operation
    sub_resource: str = pydantic.Field("", alias="subResource")
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = pydantic.Field(None, alias="oldObject")
    dry_run: bool = pydantic.Field(False, alias="dryRun")


class AdmissionReview(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="ignore", populate_by_name=True)

    api_version: str = pydantic.Field(alias="apiVersion")
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest

    @pydantic.field_validator("api_version")
    @classmethod
    def _known_version(cls, value: str) -> str:
        if value not in API_VERSIONS:
            raise ValueError(f"apiVersion must be one of {sorted(API_VERSIONS)}")
        return value


@dataclass(frozen=True, slots=True)
class Decision:
    """What admission answers for one object.

    ``allowed`` False is a denial (``status.code`` 403, ``message`` naming the object, the field, the
    amount asked and the amount left). ``warnings`` reach the ``kubectl`` user without blocking
    (checks that depend on usage right now: the scheduler is the authority). ``patch`` is the
    JSONPatch a mutation applies; ``patched`` the object after it (for ``gpuq simulate``).
    """

    allowed: bool = True
    message: str = ""
    warnings: tuple[str, ...] = ()
    patch: tuple[PatchOp, ...] = ()
    patched: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def code(self) -> int:
        return 200 if self.allowed else 403


ALLOW: Final = Decision()


def deny(message: str, warnings: tuple[str, ...] = ()) -> Decision:
    return Decision(allowed=False, message=message, warnings=warnings)


def parse_review(body: bytes) -> AdmissionReview:
    """Parse and validate a request body; raises :class:`MalformedReview` with a one-line reason."""
    if not body:
        raise MalformedReview("empty body: expected an admission.k8s.io/v1 AdmissionReview")
    try:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return AdmissionReview.model_validate_json(body)
        return AdmissionReview.model_validate(data)
    except pydantic.ValidationError as err:
        raise MalformedReview(_one_line(err)) from None


def _one_line(err: pydantic.ValidationError) -> str:
    first = err.errors(include_url=False, include_context=False, include_input=False)
    if not first:
        return "invalid AdmissionReview"
    e = first[0]
    if e["type"] == "json_invalid":
        return "body is not valid JSON"
    location = ".".join(str(part) for part in e["loc"]) or "body"
    more = f" (and {len(first) - 1} more)" if len(first) > 1 else ""
    message = str(e["msg"]).replace("\n", " ")
    return f"invalid AdmissionReview: {location}: {message}{more}"


def response_body(review: AdmissionReview, decision: Decision) -> bytes:
    """The AdmissionReview answer: echoes apiVersion, kind and ``request.uid``."""
    response: dict[str, Any] = {"uid": review.request.uid, "allowed": decision.allowed}
    if not decision.allowed:
        response["status"] = {
            "code": decision.code,
            "reason": "Forbidden",
            "message": decision.message,
        }
    elif decision.message:
        response["status"] = {"code": 200, "message": decision.message}
    if decision.warnings:
        response["warnings"] = list(decision.warnings)
    if decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(pydantic_core.to_json(list(decision.patch))).decode("ascii")
    return pydantic_core.to_json({"apiVersion": review.api_version, "kind": KIND, "response": response})
