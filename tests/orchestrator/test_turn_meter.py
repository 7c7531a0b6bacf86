"""core.TurnMeter: what a model turn cut short by a cancel or a broken stream used."""

from __future__ import annotations

from services.orchestrator.core import TurnMeter
from shared.messages import Usage
from shared.model.tokens import text_tokens


def test_a_turn_cut_short_counts_its_input_and_what_it_streamed_estimated() -> None:
    meter = TurnMeter()
    meter.report(Usage(500, 0, estimated=True))
    meter.stream("Tea is a drink ")
    meter.stream("made from leaves")
    assert meter.cut_short() == Usage(500, text_tokens("Tea is a drink made from leaves"), True)


def test_the_model_servers_report_wins_over_the_count() -> None:
    meter = TurnMeter()
    meter.report(Usage(500, 0, estimated=True))
    meter.stream("Tea")
    meter.report(Usage(480, 2))
    assert meter.cut_short() == Usage(480, 2)


def test_a_turn_that_ended_with_its_message_leaves_nothing_to_count() -> None:
    meter = TurnMeter()
    meter.report(Usage(500, 0, estimated=True))
    meter.stream("Tea is a drink")
    meter.ended()
    meter.stream("ignored: no turn is under way")
    assert meter.cut_short() is None


def test_a_new_turn_counts_only_its_own_output() -> None:
    meter = TurnMeter()
    meter.report(Usage(100, 0, estimated=True))
    meter.stream("first turn's answer, long enough to count")
    meter.ended()
    meter.report(Usage(200, 0, estimated=True))
    meter.stream("ok")
    assert meter.cut_short() == Usage(200, text_tokens("ok"), True)
