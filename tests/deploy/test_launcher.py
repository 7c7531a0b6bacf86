"""The launcher's port picking: the e2e fixtures start several suites in one test run, each
service on its own free port."""

from __future__ import annotations

from services.launcher import free_port


def test_free_port_never_hands_out_a_port_twice() -> None:
    # The OS offers a closed probe's port again (about 7% of 2,000 probes here): two services
    # given one port would collide when the second starts.
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)
