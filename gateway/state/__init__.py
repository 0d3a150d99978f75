"""Limits shared by several gateway replicas: the ``state:`` section (docs/fleet.md).

``contract.py`` is what the request path asks; ``local.py`` answers for one replica (the
decision core's own gates do everything); ``redis_store.py`` keeps tenant quotas and
concurrency leases in Redis, ``scripts.py`` holds its server-side scripts and
``fallback.py`` the local share a replica enforces while Redis cannot answer.
"""
