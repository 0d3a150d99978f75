"""Where the backends come from when the config does not list them.

- ``inference_pool``: an ``InferencePool`` and its pods (plain API JSON) to backend configs;
  pure, no I/O.
- ``kubernetes_watch``: list and watch the pool and its pods (lightkube), hand each new set
  of backends to the gateway; relists on an expired watch, backs off on API errors, and
  keeps the last known set while the API server cannot be reached.
- ``apply``: a new set of backends into the backend pool and the metrics scraper.
"""
