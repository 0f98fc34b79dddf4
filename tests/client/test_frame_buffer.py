"""FrameBuffer: the reused receive buffer of a connection (asyncio.BufferedProtocol)."""

from __future__ import annotations

import asyncio
import struct

import pytest

from airflow_provider_rocketmq.client.connection import RemotingProtocol, open_connection
from airflow_provider_rocketmq.client.protocol.command import (
    MAX_FRAME,
    READ_BUFFER,
    FrameBuffer,
    RemotingCommand,
    decode_frame,
)
from airflow_provider_rocketmq.client.protocol.errors import FrameTooLargeError, ProtocolError
from tests import recorded_vectors as vectors

FRAMES = [bytes.fromhex(r["frame_hex"]) for r in vectors.all_records()]


def _read(fb: FrameBuffer, data: bytes, most: int) -> list[RemotingCommand]:
    """What a transport does: reads of at most ``most`` bytes into the offered views."""
    out: list[RemotingCommand] = []
    i = 0
    while i < len(data):
        view = fb.writable()
        assert len(view) > 0
        k = min(len(view), most, len(data) - i)
        view[:k] = data[i:i + k]
        out += fb.filled(k)
        i += k
    return out


def _key(cmd: RemotingCommand) -> tuple[int, int, dict[str, str] | None, bytes | None]:
    return cmd.code, cmd.opaque, cmd.ext_fields, cmd.body


@pytest.mark.parametrize("most", [1, 3, 4, 5, 97, 4096, READ_BUFFER])
def test_recorded_frames_come_out_whole_whatever_the_read_sizes(most: int) -> None:
    stream = b"".join(FRAMES)
    fb = FrameBuffer()
    got = _read(fb, stream, most)
    assert [_key(c) for c in got] == [_key(decode_frame(f)) for f in FRAMES]
    assert fb.pending == 0


def _big_frame(body_len: int, opaque: int) -> bytes:
    cmd = RemotingCommand.request(11, {"topic": "T"}, body=bytes(range(256)) * (body_len // 256))
    cmd.opaque = opaque
    return cmd.encode()


def test_a_frame_larger_than_the_buffer_grows_it_then_the_buffer_shrinks_back() -> None:
    big = _big_frame(3 * READ_BUFFER, 7)
    small = FRAMES[0]
    fb = FrameBuffer()
    got = _read(fb, small + big + small, 65536)
    assert [c.opaque for c in got] == [decode_frame(small).opaque, 7, decode_frame(small).opaque]
    assert got[1].body == bytes(range(256)) * (3 * READ_BUFFER // 256)
    assert len(fb.writable()) == READ_BUFFER  # drained: back to the normal size


def test_bodies_are_copies_that_later_reads_do_not_overwrite() -> None:
    fb = FrameBuffer()
    first = _read(fb, FRAMES[0], READ_BUFFER)[0]
    before = first.body
    snapshot = None if before is None else bytes(before)
    _read(fb, b"".join(FRAMES[1:40]), READ_BUFFER)  # the same bytes of the buffer, reused
    assert first.body == snapshot


def test_a_view_still_held_by_the_transport_does_not_stop_the_buffer_from_growing() -> None:
    fb = FrameBuffer()
    big = _big_frame(2 * READ_BUFFER, 9)
    held = fb.writable()  # a transport may keep its last view alive until the next read
    held[:1000] = big[:1000]
    assert fb.filled(1000) == []
    rest = _read(fb, big[1000:], READ_BUFFER)  # growing must not resize the exported bytearray
    assert [c.opaque for c in rest] == [9]
    held.release()


def test_oversized_or_negative_length_is_a_typed_error_before_any_growth() -> None:
    fb = FrameBuffer()
    view = fb.writable()
    view[:8] = struct.pack(">i", MAX_FRAME + 1) + b"\x00\x00\x00\x02"
    with pytest.raises(FrameTooLargeError):
        fb.filled(8)
    fb = FrameBuffer()
    view = fb.writable()
    view[:8] = struct.pack(">i", -5) + b"xxxx"
    with pytest.raises(ProtocolError):
        fb.filled(8)
    assert len(view) == READ_BUFFER  # nothing was allocated for the announced length


async def test_a_real_connection_reads_large_frames_through_the_buffer() -> None:
    """A server on 127.0.0.1 answers with bodies of 1 KiB to 3 MiB; every byte arrives intact."""
    sizes = [1024, READ_BUFFER - 5, READ_BUFFER + 7, 3 * 1024 * 1024]

    async def echo(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        n = int(cmd.ext["n"])
        return cmd.make_response(0, {"n": str(n)}, body=bytes(range(251)) * (n // 251) + b"z" * (n % 251))

    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: RemotingProtocol({77: echo}), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = await open_connection(f"127.0.0.1:{port}")
    try:
        answers = await asyncio.gather(*(conn.request(RemotingCommand.request(77, {"n": str(n)}), 10)
                                         for n in sizes))
        for n, resp in zip(sizes, answers, strict=True):
            assert resp.body == bytes(range(251)) * (n // 251) + b"z" * (n % 251)
    finally:
        await conn.close()
        server.close()
        await server.wait_closed()


def test_reads_of_ordinary_frames_reuse_one_buffer() -> None:
    """No allocation per read: every view offered is into the same bytearray."""
    fb = FrameBuffer()
    owners = set()
    for frame in FRAMES * 3:
        view = fb.writable()
        owners.add(id(view.obj))
        view[:len(frame)] = frame
        view.release()
        assert len(fb.filled(len(frame))) == 1
    assert len(owners) == 1


def test_reading_on_after_a_rejected_prefix_never_allocates_past_max_frame() -> None:
    fb = FrameBuffer()
    view = fb.writable()
    view[:4] = struct.pack(">i", 0x7FFFFFFF)  # announces 2 GiB
    view.release()
    with pytest.raises(FrameTooLargeError):
        fb.filled(READ_BUFFER - 1000)  # little room left: the next writable() must make some
    assert len(fb.writable()) <= MAX_FRAME + 4
