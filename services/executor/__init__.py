"""Executor service: hosts the agents (worker; memory later) that run one step of a run."""
