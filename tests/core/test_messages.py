"""The coordinator's internal messages (swarm_app/core/messages.py): declared once, documented
from the declarations, and validated where they arrive."""

from __future__ import annotations

import logging
from pathlib import Path

import msgspec
import pytest

from swarm_app.core import messages
from worker.shared.protocol import ErrorCode

pytestmark = pytest.mark.engine  # no coordinator service: one pass of CI runs it

ROOT = Path(__file__).resolve().parents[2]


def test_message_reference_in_docs_is_generated_from_the_code():
    doc = (ROOT / "docs" / "messages.md").read_text()
    assert messages.render_docs() in doc, (
        "regenerate: python -m swarm_app.core.messages, then paste into docs/messages.md"
    )


def test_every_group_event_in_the_code_is_declared():
    """Each ``group_send`` in swarm_app sends a declared event (built with send_event), and each
    declared event has a handler (its type with the dot as an underscore)."""
    paths = [path for path in (ROOT / "swarm_app").rglob("*.py") if path.name != "messages.py"]
    sources = [path.read_text() for path in paths]
    sends = sum(source.count("layer.group_send") for source in sources)
    built = sum(source.count("send_event(") for source in sources)
    assert sends == built == 5, (sends, built)
    handlers = "".join(sources)
    for event in messages.EVENTS:
        assert f"def {event.__struct_config__.tag.replace('.', '_')}(" in handlers, event


def test_an_event_is_read_as_its_declaration_and_a_malformed_one_dropped(caplog):
    sent = messages.send_event(messages.SessionEnd(code=ErrorCode.TOKEN_REVOKED, message="revoked"))
    assert sent == {"type": "session.end", "code": "token_revoked", "message": "revoked"}
    assert messages.receive_event(sent, messages.SessionEnd) == messages.SessionEnd(
        code=ErrorCode.TOKEN_REVOKED, message="revoked"
    )
    with caplog.at_level(logging.WARNING, logger="swarm_app.core.messages"):
        for event, declaration in (
            ({"type": "session.end", "code": "no_such_code", "message": "x"}, messages.SessionEnd),
            ({"type": "metrics.points", "points": [{"round": 7}]}, messages.MetricsPoints),
            ({"type": "campaign.state", "state": "paused", "extra": 1}, messages.CampaignStateEvent),
        ):
            assert messages.receive_event(event, declaration) is None
    assert caplog.text.count("dropped a malformed") == 3


def test_a_viewer_frame_is_a_watch_or_a_bad_frame():
    assert messages.decode_viewer_frame('{"type": "watch", "agents": ["node:a"]}').agents == ["node:a"]
    too_long = '{"type": "watch", "agents": ["' + "a" * 81 + '"]}'
    for raw in ('{"agents": []}', too_long, "{", "[]"):
        with pytest.raises(msgspec.DecodeError) as refused:
            messages.decode_viewer_frame(raw)
        frame = msgspec.json.decode(messages.bad_frame(refused.value), type=messages.ErrorFrame)
        assert frame.code == "bad_frame" and 0 < len(frame.message) <= messages.MAX_ERROR_CHARS
