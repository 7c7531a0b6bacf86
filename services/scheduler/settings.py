"""The scheduler's own settings (AGENTMESH_SCHEDULER_* environment variables)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

# Points of the claim/dispatch cycle where the test-only kill hook can fire.
# before_commit / after_commit: the claim transaction; during_dispatch: the first event of a
# run this replica started; during_follow: the first event of a run it follows (a take-over);
# before_outcome: the run's end is known, the job run not yet written.
KillPoint = Literal[
    "", "before_commit", "after_commit", "during_dispatch", "during_follow", "before_outcome"
]


class SchedulerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTMESH_SCHEDULER_", extra="ignore")

    # Seconds between two claim passes when the last one found nothing due.
    claim_interval_seconds: float = Field(default=1.0, gt=0)
    # Due jobs taken per claim transaction.
    batch_size: int = Field(default=500, ge=1, le=10_000)
    # How long a replica owns a run it dispatches without renewing the lease.
    lease_seconds: float = Field(default=30.0, gt=0)
    # Dispatch attempts of one run before it is FAILED.
    max_attempts: int = Field(default=5, ge=1, le=100)
    # Exponential backoff between attempts: initial * 2^(attempt-1), capped.
    backoff_initial_seconds: float = Field(default=2.0, ge=0)
    backoff_max_seconds: float = Field(default=300.0, ge=0)
    # Catch-up policy "all": at most this many missed slots run after an outage.
    catch_up_max: int = Field(default=10, ge=1, le=1000)
    # MISSED rows recorded per job and claim (the newest); older ones are counted in the log.
    missed_record_limit: int = Field(default=1000, ge=1, le=100_000)
    # A slot whose fire time passed less than this long ago is on time (policy "skip" runs it).
    misfire_grace_seconds: float = Field(default=60.0, ge=0)
    # Runs dispatched at the same time by one replica.
    dispatch_concurrency: int = Field(default=64, ge=1, le=10_000)
    # While a run's outcome is learnt from history (its event stream was lost), the pause
    # between two looks at its run record.
    outcome_poll_seconds: float = Field(default=1.0, gt=0, le=60)
    # Test-only: the process kills itself with SIGKILL when it reaches this point.
    test_kill_at: KillPoint = ""
