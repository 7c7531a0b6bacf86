"""History's use cases by aggregate, each in the caller's unit of work (services/history/
unit.py): read what the plan needs, ask the pure rules for the plan, write it. The servicer
converts a request, opens the unit, calls one of these and converts the result back."""

from services.history.handlers import audit, context, deletions, runs, threads

__all__ = ["audit", "context", "deletions", "runs", "threads"]
