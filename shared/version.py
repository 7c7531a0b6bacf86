"""The suite's version: in every gRPC response's trailing metadata (x-agentmesh-version), the
start-up log line, the gateway's OpenAPI document and the service.version of every trace
span. A module of its own so that whoever reports it (shared/server.py,
shared/telemetry.py, the gateway) imports it without importing the server bootstrap."""

VERSION = "0.1.0"
