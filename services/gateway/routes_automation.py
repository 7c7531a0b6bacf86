"""The caller's automation jobs and their runs (scheduler service)."""

from __future__ import annotations

from typing import Annotated, Any

from agentmesh.scheduler.v1 import scheduler_service_pb2 as pb
from fastapi import APIRouter, Depends, Header, Path, Request, Response

from services.gateway import jobs
from services.gateway.auth import Caller, caller
from services.gateway.clients import Clients, unary
from services.gateway.errors import ApiError, invalid
from services.gateway.openapi import JOB_PATCH, JOB_PUT, errors, json_body
from services.gateway.params import IDENTIFIER, PageSize, PageToken, only_params
from services.gateway.quota import Quota, admit
from services.gateway.routes_runs import read_body
from services.gateway.strict import json_object
from shared.ids import MAX_ID_CHARS
from shared.settings import Settings

router = APIRouter()

JOBS = "/api/v1/automation/jobs"
JobId = Annotated[
    str, Path(min_length=1, max_length=MAX_ID_CHARS, description="The job's id"), IDENTIFIER
]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=128,
        description="The same key creates the job once (a retried POST returns the first job)",
    ),
]

_JOB_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": jobs.JobIn.model_json_schema(by_alias=True)}},
    }
}


async def _scheduler(request: Request, who: Caller, method: str, message: Any) -> Any:
    """One call to the scheduler for the caller; errors name fields as the caller wrote them."""
    clients: Clients = request.app.state.clients
    settings: Settings = request.app.state.settings
    try:
        return await unary(
            getattr(clients.scheduler, method),
            message,
            owner=who.owner,
            service="scheduler",
            timeout=settings.rpc_timeout_seconds,
        )
    except ApiError as err:
        raise jobs.renamed(err) from None


async def _body(request: Request) -> dict[str, Any]:
    settings: Settings = request.app.state.settings
    return json_object(await read_body(request, settings.max_request_bytes), "a job")


def _version(data: dict[str, Any]) -> int:
    """The version an update is based on (optimistic concurrency: a stale one is 409)."""
    version = data.get("version")
    if version is None:
        raise invalid(
            "version", "is required: the version of the job this update is based on (GET it first)"
        )
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise invalid("version", "must be a positive integer (the job's version)")
    return version


@router.post(
    JOBS,
    summary="Create an automation job",
    responses=errors(409, 413),
    status_code=201,
    openapi_extra=_JOB_BODY,
    dependencies=[Depends(only_params())],
)
async def create_job(
    request: Request,
    response: Response,
    who: Caller = Depends(caller),
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    parsed = jobs.validate(jobs.JobIn, await _body(request))
    reply = await _scheduler(
        request,
        who,
        "CreateJob",
        pb.CreateJobRequest(job=jobs.job_pb(parsed), request_id=idempotency_key or ""),
    )
    response.headers["Location"] = f"{JOBS}/{reply.job.id}"
    return jobs.job_json(reply.job)


@router.get(
    JOBS,
    summary="The caller's automation jobs (oldest first)",
    dependencies=[Depends(only_params("page_size", "page_token"))],
)
async def list_jobs(
    request: Request,
    who: Caller = Depends(caller),
    page_size: PageSize = 0,
    page_token: PageToken = "",
) -> dict[str, Any]:
    reply = await _scheduler(
        request, who, "ListJobs", pb.ListJobsRequest(page_size=page_size, page_token=page_token)
    )
    out: dict[str, Any] = {"jobs": [jobs.job_json(j) for j in reply.jobs]}
    if reply.next_page_token:
        out["nextPageToken"] = reply.next_page_token
    return out


@router.get(
    f"{JOBS}/{{job_id}}",
    summary="One automation job",
    responses=errors(404),
    dependencies=[Depends(only_params())],
)
async def get_job(request: Request, job_id: JobId, who: Caller = Depends(caller)) -> dict[str, Any]:
    reply = await _scheduler(request, who, "GetJob", pb.GetJobRequest(job_id=job_id))
    return jobs.job_json(reply.job)


@router.put(
    f"{JOBS}/{{job_id}}",
    summary="Replace a job's settings (needs `version`; a stale one is 409)",
    responses=errors(404, 409, 413),
    openapi_extra=json_body(JOB_PUT),
    dependencies=[Depends(only_params())],
)
async def replace_job(
    request: Request, job_id: JobId, who: Caller = Depends(caller)
) -> dict[str, Any]:
    data = await _body(request)
    version = _version(data)
    parsed = jobs.validate(jobs.JobIn, data)
    reply = await _scheduler(
        request,
        who,
        "UpdateJob",
        pb.UpdateJobRequest(job=jobs.job_pb(parsed, job_id=job_id, version=version)),
    )
    return jobs.job_json(reply.job)


@router.patch(
    f"{JOBS}/{{job_id}}",
    summary="Change some of a job's settings (JSON Merge Patch; needs `version`)",
    responses=errors(404, 409, 413),
    openapi_extra=json_body(JOB_PATCH),
    dependencies=[Depends(only_params())],
)
async def patch_job(
    request: Request, job_id: JobId, who: Caller = Depends(caller)
) -> dict[str, Any]:
    patch = await _body(request)
    version = _version(patch)
    current = await _scheduler(request, who, "GetJob", pb.GetJobRequest(job_id=job_id))
    # The merge base may be newer than `version`: the scheduler then refuses the update
    # (ABORTED -> 409), so a patch never lands on a job the caller has not seen.
    merged = jobs.merge_patch(jobs.job_json(current.job), patch)
    parsed = jobs.validate(jobs.JobIn, merged)
    reply = await _scheduler(
        request,
        who,
        "UpdateJob",
        pb.UpdateJobRequest(job=jobs.job_pb(parsed, job_id=job_id, version=version)),
    )
    return jobs.job_json(reply.job)


@router.delete(
    f"{JOBS}/{{job_id}}",
    summary="Delete a job (its runs go with it)",
    responses=errors(404, 409),
    status_code=204,
    response_class=Response,
    dependencies=[Depends(only_params())],
)
async def delete_job(request: Request, job_id: JobId, who: Caller = Depends(caller)) -> Response:
    await _scheduler(request, who, "DeleteJob", pb.DeleteJobRequest(job_id=job_id))
    return Response(status_code=204)


@router.post(
    f"{JOBS}/{{job_id}}:pause",
    summary="Pause a job: no slot runs until it is resumed",
    responses=errors(404, 409),
    dependencies=[Depends(only_params())],
)
async def pause_job(
    request: Request, job_id: JobId, who: Caller = Depends(caller)
) -> dict[str, Any]:
    reply = await _scheduler(request, who, "PauseJob", pb.PauseJobRequest(job_id=job_id))
    return jobs.job_json(reply.job)


@router.post(
    f"{JOBS}/{{job_id}}:resume",
    summary="Resume a paused job from now (slots passed while paused are not run)",
    responses=errors(404, 409),
    dependencies=[Depends(only_params())],
)
async def resume_job(
    request: Request, job_id: JobId, who: Caller = Depends(caller)
) -> dict[str, Any]:
    reply = await _scheduler(request, who, "ResumeJob", pb.ResumeJobRequest(job_id=job_id))
    return jobs.job_json(reply.job)


@router.post(
    f"{JOBS}/{{job_id}}:trigger",
    summary="Run a job now (its schedule is unchanged); answers the recorded job run",
    responses=errors(404, 409),
    status_code=202,
    dependencies=[Depends(only_params())],
)
async def trigger_job(
    request: Request, job_id: JobId, who: Caller = Depends(caller)
) -> dict[str, Any]:
    # A triggered run is a run the owner asks for now, as a POST /runs: the owner's quotas
    # admit it first (429 before the job run is recorded). It has no stream of the caller's
    # to hold a concurrent slot for, so the slot goes back at once.
    quota: Quota = request.app.state.quota
    await quota.release(await admit(quota, who.owner))
    reply = await _scheduler(request, who, "TriggerJob", pb.TriggerJobRequest(job_id=job_id))
    return jobs.job_run_json(reply.job_run)


@router.get(
    f"{JOBS}/{{job_id}}/runs",
    summary="A job's runs, newest slot first",
    responses=errors(404),
    dependencies=[Depends(only_params("page_size", "page_token"))],
)
async def list_job_runs(
    request: Request,
    job_id: JobId,
    who: Caller = Depends(caller),
    page_size: PageSize = 0,
    page_token: PageToken = "",
) -> dict[str, Any]:
    reply = await _scheduler(
        request,
        who,
        "ListJobRuns",
        pb.ListJobRunsRequest(job_id=job_id, page_size=page_size, page_token=page_token),
    )
    out: dict[str, Any] = {"runs": [jobs.job_run_json(r) for r in reply.job_runs]}
    if reply.next_page_token:
        out["nextPageToken"] = reply.next_page_token
    return out
