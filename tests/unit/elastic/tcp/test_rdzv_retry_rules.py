"""The pure rules of issue 33: the agent's back-off and progress lines (``retry.py``), and the admission's room and
suspects (``admission_rules.py``). Tables; clocks and jitter passed in."""
from __future__ import annotations

import pytest

from tfdist.launch.elastic.tcp.admission_rules import (PENDING_LEAST, PENDING_TOTAL, Suspects, handshake_room,
                                                        listen_backlog)
from tfdist.launch.elastic.rendezvous.retry import Backoff, gave_up_text, progress_due, waiting_line


@pytest.mark.parametrize("failures, expected", [(0, 0.0), (1, 0.05), (2, 0.1), (3, 0.2), (6, 1.6), (7, 2.0),
                                                (50, 2.0), (10_000, 2.0)])
def test_the_step_doubles_from_the_first_delay_up_to_the_cap(failures, expected):
    assert Backoff().step(failures) == pytest.approx(expected)


@pytest.mark.parametrize("draw, factor", [(0.0, 0.5), (0.5, 0.75), (0.999, 0.9995), (-1.0, 0.5), (5.0, 1.0)])
def test_jitter_spreads_each_pause_between_half_the_step_and_the_step(draw, factor):
    assert Backoff(first=1.0, cap=8.0).delay(3, draw) == pytest.approx(4.0 * factor)


@pytest.mark.parametrize("now, deadline, expected", [
    (0.0, 10.0, 0.4),  # the step after 4 failures (0.4 s) at draw 1
    (9.9, 10.0, 0.1),  # cut to the deadline
    (10.0, 10.0, None),  # the deadline has passed: give up
    (11.0, 10.0, None),
])
def test_the_pause_is_cut_to_the_deadline_and_none_after_it(now, deadline, expected):
    pause = Backoff().pause(4, 1.0, now, deadline)
    assert pause == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize("now, last, due", [(0.0, 0.0, False), (9.99, 0.0, False), (10.0, 0.0, True),
                                            (25.0, 14.0, True), (23.0, 14.0, False)])
def test_a_progress_line_every_ten_seconds(now, last, due):
    assert progress_due(now, last) is due


def test_the_lines_name_where_what_happened_and_how_long():
    assert waiting_line("h:1", "busy", 1, 10.2, 120.0) == "waiting for the rendezvous at h:1: busy (1 try, 10s of 120s)"
    assert gave_up_text("h:1", "the handshake timed out", 7) == \
        "no rendezvous at h:1 let this agent in in time (7 tries; last: the handshake timed out)"


@pytest.mark.parametrize("nodes, descriptors, room", [
    (1, None, PENDING_TOTAL), (2, 20000, PENDING_TOTAL), (1000, None, 2000), (1000, 20000, 2000),
    (2, 1024, 256), (1000, 1024, 256),  # a quarter of the descriptors: the members need the rest
    (1000, 100, PENDING_LEAST),  # never below the least
])
def test_the_handshake_room_scales_with_the_job_within_the_descriptors(nodes, descriptors, room):
    assert handshake_room(nodes, descriptors) == room


@pytest.mark.parametrize("nodes, backlog", [(1, 128), (64, 128), (1000, 2000)])
def test_the_listen_backlog_scales_with_the_job(nodes, backlog):
    assert listen_backlog(nodes) == backlog


def test_a_source_is_suspect_only_after_it_failed_and_for_a_while():
    suspects = Suspects(keep_for=30.0, kept=3)
    assert not suspects.holds("10.0.0.1", 0.0)  # an address is not counted before it failed
    suspects.mark("10.0.0.1", 1.0)
    assert suspects.holds("10.0.0.1", 31.0) and not suspects.holds("10.0.0.1", 31.5)
    assert "10.0.0.1" not in suspects  # forgotten once stale


def test_suspects_are_bounded_the_oldest_forgotten_first():
    suspects = Suspects(keep_for=30.0, kept=3)
    for i in range(5):
        suspects.mark(f"10.0.0.{i}", float(i))
    assert len(suspects) == 3 and "10.0.0.1" not in suspects and suspects.holds("10.0.0.4", 5.0)
    suspects.mark("10.0.0.2", 6.0)  # marked again: the newest now
    suspects.mark("10.0.0.9", 7.0)
    assert "10.0.0.2" in suspects and "10.0.0.3" not in suspects
