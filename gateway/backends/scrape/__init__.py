"""Live saturation signals from the backends' own /metrics (docs/signals.md).

- ``engines``: metric names per engine, as data.
- ``parse`` / ``sample``: body → the few values that drive decisions.
- ``derive`` / ``signals``: windowed rates, bucket-honest quantiles, phases, capacity (pure).
- ``scraper.MetricsScraper``: one task per backend; ``signals(name, now)`` → ``BackendView``
  fields (``view``).
- ``exposition``: ``sluicegate_backend_*`` and the ``/admin/backends`` JSON.
- ``report``: the text of ``sluicegate diagnose``.
"""
