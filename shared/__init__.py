"""What every agentmesh service shares: bootstrap, errors, settings, storage, event log,
domain rules."""
