"""Compacting tool output: repetition goes, evidence stays (logs, events), and the system prompt stays complete."""

from __future__ import annotations

import re
from typing import Any

from agent_sre.models.tools import TOOL_SPECS
from agent_sre.policy.conversation import NAMED_CHOICES, system_prompt
from agent_sre.tools.compact import compact_log, event_message, routine, routine_note
from agent_sre.tools.read import events_table

UID = "74d74872-ff0e-433a-ace7-17c34aefb1d1"


def test_lines_alike_but_for_their_numbers_are_said_once_at_the_newest() -> None:
    access = [f'INFO: 10.244.1.{i}:{40000 + i} - "GET /v1/items?id={i} HTTP/1.1" 200 OK' for i in range(30)]
    out = compact_log("\n".join(["starting v1.2", *access, "ping", "ping"]))
    assert out.split("\n") == ["starting v1.2", access[-1] + " (x30 similar)", "ping (x2)"]


def test_an_error_status_is_not_just_another_number() -> None:
    lines = ['"GET /item/1 HTTP/1.1" 200 OK', '"GET /item/2 HTTP/1.1" 200 OK', '"GET /item/3 HTTP/1.1" 503 OK']
    assert compact_log("\n".join(lines)).split("\n") == [lines[1] + " (x2 similar)", lines[2]]


def test_repeated_errors_keep_their_newest_three_and_the_count() -> None:
    errors = [f"t={i}s level=error msg=\"upstream failed\" upstream=catalog" for i in range(8)]
    out = compact_log("\n".join(["listening", *errors]))
    assert out.split("\n") == ["listening", errors[5], errors[6], errors[7] + " (x8 similar)"]


def test_stack_frames_stay_in_order_even_when_they_look_alike() -> None:
    trace = ["Traceback (most recent call last):", '  File "/app/a.py", line 3, in <module>',
             '  File "/app/a.py", line 9, in <module>', "ValueError: invalid literal for int() with base 10: '72s'"]
    assert compact_log("\n".join(trace)) == "\n".join(trace)


def test_events_drop_pod_uids_and_routine_normal_events_are_only_counted() -> None:
    assert event_message(f"Back-off restarting failed container cart in pod cart-x_shop({UID})") == \
        "Back-off restarting failed container cart in pod cart-x"
    pod = {"kind": "Pod", "name": "cart-x"}
    events: list[dict[str, Any]] = [
        {"type": "Normal", "reason": "Scheduled", "message": "assigned", "involvedObject": pod},
        {"type": "Normal", "reason": "Pulled", "message": "pulled", "involvedObject": pod},
        {"type": "Normal", "reason": "ScalingReplicaSet", "message": "Scaled down replica set cart-1 to 0 from 1",
         "involvedObject": {"kind": "Deployment", "name": "cart"}},
        {"type": "Warning", "reason": "BackOff", "message": f"Back-off in pod cart-x_shop({UID})", "count": 2,
         "involvedObject": pod, "lastTimestamp": "2026-01-01T00:01:00Z"},
        {"type": "Warning", "reason": "BackOff", "message": f"Back-off in pod cart-x_shop({UID})", "count": 3,
         "involvedObject": pod, "lastTimestamp": "2026-01-01T00:02:00Z"},
    ]
    assert [routine(e) for e in events] == [True, True, False, False, False]
    assert routine_note(events) == "+2 routine Normal events not shown" and routine_note(events[2:]) == ""
    header, *rows, note = events_table(events, now=0.0).split("\n")
    assert header.split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    # The runbook reads a scale-down as `deployment/NAME  Scaled down ...`; one event recorded twice is one row.
    assert re.search(r"deployment/cart\s+Scaled down replica set cart-1 to 0 from 1$", rows[0])
    assert len(rows) == 2 and re.search(r"Warning\s+BackOff\s+pod/cart-x\s+Back-off in pod cart-x \(x5\)$", rows[1])
    assert note == "+2 routine Normal events not shown"


def test_the_short_system_prompt_still_names_every_tool_and_argument() -> None:
    prompt = system_prompt()
    for spec in TOOL_SPECS.values():
        line = next(line for line in prompt.split("\n") if line.startswith(f"{spec.name}("))
        for arg in spec.args.model_json_schema().get("properties", {}):
            assert re.search(rf"[(, ]{arg}\??[:,)]", line), (arg, line)
    for name, choices in NAMED_CHOICES.items():
        assert f"{name}: {'|'.join(choices)}" in prompt and "kind: KIND" in prompt
