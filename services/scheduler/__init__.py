"""The scheduler: per-owner automation jobs on local-time schedules, each slot dispatched
to the orchestrator exactly once across any number of replicas."""
