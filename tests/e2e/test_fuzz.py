"""A property-based fuzz test of every HTTP operation of the gateway, over the real suite.

schemathesis reads the gateway's own OpenAPI document and sends each operation schema-valid
and schema-violating requests (bodies, parameters, headers) as an admin caller (so the
audit is reached too): its coverage phase (boundary and type-violating values of every
field) and EXAMPLES generated cases per operation. Every answer must be below 500 and
conform to the document: a documented status and Allow header, the documented content type,
and an error body of the documented shape; schema-violating input must be refused.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from services.gateway.app import create_app
from services.launcher import Suite
from shared.settings import Settings
from tests.e2e.conftest import token

pytestmark = pytest.mark.e2e

EXAMPLES = 10


def _document() -> dict[str, Any]:
    """The gateway's OpenAPI document (what GET /openapi.json serves; the test checks that)."""
    return create_app(Settings()).openapi()


# Read at collection time: schemathesis makes one test per operation of it.
schema = schemathesis.openapi.from_dict(_document())


def test_the_fuzzed_document_is_the_one_the_gateway_serves(suite: Suite) -> None:
    served = httpx.get(f"{suite.gateway_url}/openapi.json", timeout=10)
    assert served.status_code == 200
    assert served.json() == _document()


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    database=None,
)
def test_no_operation_answers_a_server_error_or_off_its_document(
    suite: Suite, case: schemathesis.Case
) -> None:
    case.call_and_validate(
        base_url=suite.gateway_url,
        headers={"Authorization": f"Bearer {token('fuzzer', admin=True)}"},
        timeout=30,
        # Every check but one: "a schema-valid request is accepted" cannot hold for rules a
        # JSON schema does not carry (an IANA zone name, a page token the server issued, a
        # job that exists), which answer a documented 400 or 404 instead.
        excluded_checks=[positive_data_acceptance],
    )
