"""``array_text.split_arrays`` against PostgreSQL itself: random arrays of random text (quotes,
backslashes, braces, commas, white space, empty strings, ``NULL`` as text and as a null)
written by a real server's ``array_out`` and split back, equal to what was written; nested
arrays and arrays with bounds refused."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spark_cdc.server_plugin.postgres.array_text import split_arrays
from spark_cdc.server_plugin.postgres.catalog import quote_literal
from spark_cdc.server_plugin.postgres.connection import Session
from spark_cdc.testing.postgres import server_binaries, start_postgres

pytestmark = pytest.mark.slow

# Text as PostgreSQL stores it (no NUL), weighted to the characters array_out quotes.
_TEXT = st.text(
    alphabet=st.one_of(st.sampled_from(list('{},"\\ \tNUL\nnul')), st.characters(codec="utf-8")),
    max_size=8,
).filter(lambda text: "\x00" not in text)
_ARRAYS = st.lists(st.lists(st.one_of(st.none(), _TEXT, st.sampled_from(["NULL", "null"]))))


@pytest.fixture(scope="module")
def database() -> Iterator[Session]:
    if server_binaries() is None:
        pytest.fail("PostgreSQL's server binaries are missing: apt-get install postgresql")
    with start_postgres() as pg:
        session = Session({**pg.options(), "dbname": pg.database})
        yield session
        session.close()


def _written(session: Session, arrays: list[list[str | None]]) -> pa.Array:
    """The arrays as the server's ``array_out`` writes them, in order."""
    rows = ", ".join(
        f"({i}, ARRAY[{', '.join('NULL' if v is None else quote_literal(v) for v in a)}]::text[])"
        for i, a in enumerate(arrays)
    )
    found = session.arrow(
        f"SELECT a::text AS a FROM (VALUES {rows}) AS x(i, a) ORDER BY i", "write arrays"
    )
    return found.column("a").combine_chunks()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arrays=_ARRAYS.filter(bool))
def test_arrays_of_text_split_back_into_what_was_written(
    database: Session, arrays: list[list[str | None]]
) -> None:
    texts = _written(database, arrays)
    counts, elements = split_arrays(pa.concat_arrays([texts, pa.array([None], pa.string())]))
    assert counts.tolist() == [len(a) for a in arrays] + [0]
    assert elements.to_pylist() == [v for a in arrays for v in a]


@pytest.mark.parametrize(
    ("sql", "problem"),
    [
        ("ARRAY[[1, 2], [3, 4]]::text", "more than one dimension"),
        ("'[0:1]={1,2}'::int[]::text", "bounds other than 1"),
    ],
)
def test_nested_arrays_and_bounds_are_refused(database: Session, sql: str, problem: str) -> None:
    texts = database.arrow(f"SELECT {sql} AS a", "write an array").column("a").combine_chunks()
    with pytest.raises(ValueError, match=problem):
        split_arrays(texts)
