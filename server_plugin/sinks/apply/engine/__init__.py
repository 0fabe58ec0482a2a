"""The apply engine, which knows no table format: the spec (``spec``), the rules that
resolve a batch with the state's changes of its keys (``history``, ``runs``, ``changes``),
the state's model and layout (``state_rows``, ``buckets``, ``key_index``, ``file_lookup``),
the state's binding to its target (``binding``), and a batch's order of commits (``batch``)
through the operations a format provides (``formats``)."""
