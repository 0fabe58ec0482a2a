"""PostgreSQL's text output of one-dimension arrays (``array_out``), split into their elements
for every value of a column at once, with numpy over the column's bytes.

``array_out`` writes ``{a,b,NULL}``; an element that is empty, reads ``NULL`` in any case, or
holds a brace, comma, quote, backslash or white space is double-quoted, with ``"`` and ``\\``
inside escaped by a backslash. So, byte by byte: a byte is escaped when an odd run of
backslashes precedes it; an unescaped quote opens or closes a quoted stretch; commas outside
quotes separate elements; the braces at a value's ends are dropped with the separators,
the quotes and the escaping backslashes; what is left is each element's text, and an
unquoted ``NULL`` is a null element. A brace elsewhere outside quotes is a nested array, and
a value not within braces has bounds (``[0:1]={…}``): both are refused (``ValueError``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_OPEN, _CLOSE, _COMMA, _QUOTE, _BACKSLASH = b'{},"\\'


def split_arrays(texts: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Each value's element count (0 for a null value) and all elements in order, as
    strings (null where the array holds NULL)."""
    filled = pc.fill_null(texts, "{}").cast(pa.large_string())
    size = len(filled)
    bounds = np.frombuffer(filled.buffers()[1], np.int64)[filled.offset : filled.offset + size + 1]
    buffer = filled.buffers()[2]
    data = np.frombuffer(buffer, np.uint8) if buffer is not None else np.zeros(0, np.uint8)
    data = data[bounds[0] : bounds[-1]]
    starts, ends = bounds[:-1] - bounds[0], bounds[1:] - bounds[0]
    if (
        np.any(ends - starts < 2)
        or np.any(data[starts] != _OPEN)
        or np.any(data[ends - 1] != _CLOSE)
    ):
        raise ValueError("an array with bounds other than 1 (or not an array)")

    backslash = data == _BACKSLASH
    index = np.arange(len(data))
    run = index - np.maximum.accumulate(np.where(backslash, -1, index))  # backslashes ending here
    escaped = np.zeros(len(data), bool)
    escaped[1:] = run[:-1] % 2 == 1
    quote = (data == _QUOTE) & ~escaped
    quoted = (np.cumsum(quote) - quote) % 2 == 1  # inside quotes (a closing quote included)
    bare = ~quoted & ~escaped
    edge = np.zeros(len(data), bool)
    edge[starts], edge[ends - 1] = True, True
    if np.any((data == _OPEN) & bare & ~edge) or np.any((data == _CLOSE) & bare & ~edge):
        raise ValueError("an array of more than one dimension")
    comma = (data == _COMMA) & bare

    empty = ends - starts == 2  # ``{}``
    begins = comma.copy()  # each element begins at its value's brace or at a comma
    begins[starts[~empty]] = True
    element = np.cumsum(begins) - 1
    commas = np.concatenate([[0], np.cumsum(comma)])
    counts = np.where(empty, 0, 1 + commas[ends] - commas[starts])
    total = int(counts.sum())

    keep = ~(edge | comma | quote | (backslash & ~escaped))
    lengths = np.bincount(element[keep], minlength=total)[:total]
    offsets = np.zeros(total + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    elements = pa.Array.from_buffers(
        pa.large_string(), total, [None, pa.py_buffer(offsets), pa.py_buffer(data[keep])]
    )
    was_quoted = np.bincount(element[quote], minlength=total)[:total] > 0
    null = ~was_quoted & np.asarray(pc.equal(elements, "NULL"))
    counts[~np.asarray(texts.is_valid())] = 0
    return counts, pc.if_else(null, pa.scalar(None, pa.string()), elements.cast(pa.string()))
