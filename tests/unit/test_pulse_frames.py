"""The frames coordinator.pulse.frames marshals for a Pulse message are pika's, byte for byte."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from pika import frame

from coordinator.pulse.frames import properties, publish_frames


def _pika_frames(
    channel: int, exchange: str, routing_key: str, body: bytes, cc: tuple[str, ...], body_max: int
) -> bytes:
    """What pika's Connection._send_message marshals for Channel.basic_publish."""
    headers = {"CC": list(cc)} if cc else None
    props = pika.BasicProperties(
        content_type="application/json",
        delivery_mode=pika.DeliveryMode.Persistent,
        headers=headers,
    )
    method = pika.spec.Basic.Publish(exchange=exchange, routing_key=routing_key)
    frames = [
        frame.Method(channel, method).marshal(),
        frame.Header(channel, len(body), props).marshal(),
    ]
    frames += [
        frame.Body(channel, body[start : start + body_max]).marshal()
        for start in range(0, len(body), body_max)
    ]
    return b"".join(frames)


@pytest.mark.parametrize(
    ("cc", "body", "body_max"),
    [
        ((), b'{"version":1}', 131_064),
        (("route.index.a", "route.tc-treeherder.v2.ü"), b'{"status":{}}' * 50, 131_064),
        ((), b"x" * 1000, 300),  # three full body frames and a short one
        ((), b"", 131_064),  # no body frame at all
    ],
)
def test_a_message_is_marshaled_as_pika_marshals_it(
    cc: tuple[str, ...], body: bytes, body_max: int
) -> None:
    exchange = "exchange/taskcluster-queue/v1/task-completed"
    key = "primary.fN1LcKYkTkC7C3Fh6NtB2A.0.wg.wi.prov.wt.-.fN1LcKYkTkC7C3Fh6NtB2A._"
    ours = publish_frames(3, exchange, key, body, properties(cc), body_max)
    assert ours == _pika_frames(3, exchange, key, body, cc, body_max)


def test_a_routing_key_past_255_bytes_is_refused_as_pika_refuses_it() -> None:
    with pytest.raises(pika.exceptions.ShortStringTooLong):
        publish_frames(1, "x", "k" * 256, b"{}", properties(()), 1000)
