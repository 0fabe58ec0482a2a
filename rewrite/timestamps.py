"""Checking ``startingTimestamp``/``endingTimestamp`` strings the way Spark's cast reads them.

The server does the actual conversion (a zone-less string means the session time zone,
which the client cannot know without a round trip); this check only refuses, up front and
under Spark's ``INVALID_CDC_OPTION.INVALID_TIMESTAMP``, strings that cast cannot read.
"""

from __future__ import annotations

import re
from datetime import date
from functools import lru_cache
from zoneinfo import available_timezones

_DATE = r"(?P<year>[+-]?\d{4,6})(?:-(?P<month>\d{1,2})(?:-(?P<day>\d{1,2}))?)?"
_TIME = r"(?P<hour>\d{1,2})(?::(?P<minute>\d{1,2})(?::(?P<second>\d{1,2})(?:\.\d{0,9})?)?)?"
_TIMESTAMP = re.compile(
    rf"^(?:{_DATE}(?:[ T](?:{_TIME})?)?|T?{_TIME.replace('?P<', '?P<t_')})\s*(?P<zone>\S.*)?$"
)
_OFFSET = re.compile(r"^(?:(?:UTC|GMT|UT)?[+-]\d{1,2}(?::?\d{2}(?::?\d{2})?)?|Z|UTC|GMT|UT)$")


@lru_cache(maxsize=1)
def _zone_ids() -> frozenset[str]:
    return frozenset(z.lower() for z in available_timezones())


def is_spark_timestamp(text: str) -> bool:
    match = _TIMESTAMP.match(text.strip())
    if not match:
        return False
    parts = match.groupdict()
    zone = parts.pop("zone")
    if zone and not (_OFFSET.match(zone) or zone.lower() in _zone_ids()):
        return False
    if parts["year"] is not None:
        year = int(parts["year"])
        month, day = int(parts["month"] or 1), int(parts["day"] or 1)
        try:
            date(year if 1 <= year <= 9999 else 2000, month, day)
        except ValueError:
            return False
        hour, minute, second = parts["hour"], parts["minute"], parts["second"]
    else:
        hour, minute, second = parts["t_hour"], parts["t_minute"], parts["t_second"]
    limits = ((hour, 23), (minute, 59), (second, 59))
    return all(value is None or int(value) <= top for value, top in limits)
