"""bench.shedding: the accepted runs' time to first event as the gateway's histogram saw
it between two scrapes, as quantiles (linear within a bucket, like PromQL's
histogram_quantile)."""

from __future__ import annotations

import math

from bench.shedding import bucket_quantile

INF = float("inf")


def test_quantiles_of_what_was_observed_between_two_scrapes() -> None:
    before = {0.01: 5.0, 0.02: 5.0, 0.1: 5.0, INF: 5.0}
    # 100 more: 50 under 10 ms, 40 in (10, 20] ms, 10 in (20, 100] ms.
    after = {0.01: 55.0, 0.02: 95.0, 0.1: 105.0, INF: 105.0}
    assert bucket_quantile(before, after, 0.5) == 10.0
    assert bucket_quantile(before, after, 0.75) == 16.25
    assert bucket_quantile(before, after, 0.99) == 92.0


def test_nothing_observed_is_nan_and_past_the_last_bound_is_that_bound() -> None:
    same = {0.01: 3.0, INF: 3.0}
    assert math.isnan(bucket_quantile(same, same, 0.99))
    assert bucket_quantile({}, {0.01: 1.0, 0.1: 1.0, INF: 4.0}, 0.99) == 100.0
