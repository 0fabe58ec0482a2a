"""The range options as hints for a changelog source: what lets it skip the commits outside
the range. ``post_process`` still filters the rows exactly, so a hint may be wider than the
range, never narrower."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from spark_cdc.rewrite.errors import cdc_error
from spark_cdc.rewrite.options import OptionValue
from spark_cdc.server_plugin.vocabulary import RANGE_OPTIONS

# A zone-less timestamp means the session's time zone, which only the server knows; the
# source gets a bound this much wider.
ANY_ZONE = timedelta(hours=18)


def range_hints(cdc: dict[str, OptionValue], streaming: bool) -> dict[str, str]:
    """The range options among ``cdc`` as the source reads them."""
    exact = [n for n in RANGE_OPTIONS if n not in ("startingTimestamp", "endingTimestamp")]
    hints = {name: option_text(cdc[name]) for name in exact if name in cdc}
    for name, widen in (("startingTimestamp", -ANY_ZONE), ("endingTimestamp", ANY_ZONE)):
        if name in cdc:
            hint = _timestamp_hint(str(cdc[name]), widen)
            if hint is not None:
                hints[name] = hint
            elif streaming and name == "startingTimestamp":
                raise cdc_error(
                    "INVALID_CDC_OPTION.INVALID_TIMESTAMP", option=name, value=cdc[name]
                )
    return hints


def option_text(value: OptionValue) -> str:
    """An option's value as Spark passes it to a source (booleans in lower case)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _timestamp_hint(text: str, widen: timedelta) -> str | None:
    """The bound for the source: as given when it names its zone, else widened by the
    largest zone offset and in UTC; None when it is not a plain date-time."""
    value = text.strip()
    try:
        moment = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith("Z") else value)
    except ValueError:
        return None
    if moment.tzinfo is not None:
        return moment.isoformat()
    return (moment + widen).replace(tzinfo=timezone.utc).isoformat()
