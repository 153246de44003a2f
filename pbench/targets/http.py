"""The ``http`` target: an assistant running as a service, behind the JSON contract of
``pbench.remote`` (POST <url>/ingest, POST <url>/reply). It has its own instructions and no
defence of ours; it drafts for its owner only when its spec says so."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from pbench import remote
from pbench.config import PlannedTarget, TargetSpecBase, target_kind
from pbench.targets import Context, Maker

LABEL = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]


class HttpTargetSpec(TargetSpecBase):
    """An assistant running as a service, behind the JSON contract of ``pbench.remote``
    (POST <url>/ingest, POST <url>/reply)."""

    kind: Literal["http"]
    label: LABEL = "http"
    url: Annotated[str, Field(pattern=r"^https?://\S+$")] = Field(description="the service's base URL")
    timeout_s: Annotated[float, Field(gt=0, le=600)] = Field(60.0, description="seconds a request may take")
    retries: Annotated[int, Field(ge=0, le=10)] = Field(
        2, description="retries of a failed request (timeout, 5xx, non-JSON, closed connection); then the "
                       "conversation is unscored with reason target_failed")
    drafts: bool = Field(False, description="the service drafts for its owner: it reads the reply request's "
                                            "reader field (pbench.remote); false: its delegation probes are skipped")


@target_kind("http", HttpTargetSpec, "assistant service", drafts=lambda spec: spec.drafts,
             cannot_draft="set drafts: true once the service reads the reply request's reader field")
def make(t: PlannedTarget, c: Context) -> Maker:
    """The service's targets, one per owner; its footprints are ingested at prepare."""
    service = remote.HttpService(t.label, t.spec.url, t.spec.timeout_s, t.spec.retries)
    return Maker(t.label, t.kind, lambda owner, prompt, defence: remote.HttpTarget(service, owner, t.label),
                 prepare=service.prepare, close=service.aclose)
