"""Orchestrator service: drives a run through history, router and executor and numbers its
events."""
