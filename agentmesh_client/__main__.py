"""`python -m agentmesh_client` is the `agentmesh` command."""

from agentmesh_client.cli import entry

entry()
