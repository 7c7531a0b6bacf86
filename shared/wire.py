"""Protobuf wire framing, for answering from stored encodings without decoding them.

A repeated message field is, on the wire, one record per item: the field's tag, the item's
length as a varint, then the item's bytes. A response made of stored items (a page of
serving copies, a batch of run events) is therefore their framed concatenation, parsed once
(`Message.FromString` / `MergeFromString`, in C) instead of decoded and copied item by item.
"""

from __future__ import annotations

from collections.abc import Iterable

_LENGTH_DELIMITED = 2


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def repeated(field_number: int, items: Iterable[bytes]) -> bytes:
    """The encoding of field `field_number` (a message field) holding each of `items`."""
    tag = varint(field_number << 3 | _LENGTH_DELIMITED)
    buf = bytearray()
    for item in items:
        buf += tag
        size = len(item)
        # Almost every item is shorter than 16 KiB: one or two length bytes, inline.
        if size < 0x80:
            buf.append(size)
        elif size < 0x4000:
            buf.append(size & 0x7F | 0x80)
            buf.append(size >> 7)
        else:
            buf += varint(size)
        buf += item
    return bytes(buf)
