"""Limits shared by several gateway replicas: the ``state:`` section (docs/fleet.md).

``contract.py`` is what the request path asks; ``local.py`` answers for one replica (the
decision core's own gates do everything); ``redis_store.py`` keeps tenant quotas and
concurrency leases in Redis, ``scripts.py`` holds its server-side scripts and
``quota_limits.py`` reads the tenant quota a request is under; the mode and the policy the core
runs in it (the local share while Redis cannot answer) are ``policies/shared_mode.py``.
``retry_share.py``/``shared_retries.py``/``retry_scripts.py``: the retry budget for the
fleet; ``scrape_share.py``/``scrape_scripts.py``/``sample_codec.py``: one scraper per backend;
``wiring.py``: a replica joined to the others (fleet mode only).
"""
