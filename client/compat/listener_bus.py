"""Add and remove streaming query listeners without PySpark's removal deadlock.

PySpark's ``StreamingQueryListenerBus.remove`` (4.0 to 4.3) joins the bus's event thread
while holding the lock that thread takes to deliver an event. When an event has arrived
but is not yet delivered as the last listener goes, each waits for the other forever
(SPARK-59623, fix open upstream). CI met it once as a ``stop()`` that hung for 900 s;
``tests/test_late_rows.py`` reproduces it every time. :func:`remove_listener` takes the
same steps as PySpark but waits for the thread after releasing the lock, and a lifecycle
lock keeps an add from overlapping a removal, as the upstream fix does.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

import pyspark.sql.connect.proto as pb2
from pyspark.sql.streaming.listener import StreamingQueryListener
from spark_cdc.rewrite import pyspark_internals

_lifecycle = threading.Lock()


def add_listener(session: Any, listener: StreamingQueryListener) -> None:
    with _lifecycle:
        session.streams.addListener(listener)


def remove_listener(session: Any, listener: StreamingQueryListener) -> None:
    bus = pyspark_internals.listener_bus(session)
    listeners = pyspark_internals.bus_listeners(bus)
    with _lifecycle:
        with pyspark_internals.bus_lock(bus):
            if listener not in listeners:
                return
            if len(listeners) > 1:
                listeners.remove(listener)
                return
            command = pb2.Command()
            command.streaming_query_listener_bus_command.remove_listener_bus_listener = True
            try:
                session.client.execute_command(command)
            except Exception as e:  # PySpark's own behaviour: keep the listener, say so
                warnings.warn(f"Failed to remove the streaming query listener: {e}", stacklevel=3)
                return
            listeners.remove(listener)
            thread = pyspark_internals.take_bus_thread(bus)
        # The thread ends once the server closes the event stream; a listener's own
        # callback that removes the last listener cannot wait for itself.
        if thread is not None and thread is not threading.current_thread():
            thread.join()
