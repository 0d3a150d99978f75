"""A soak: mixed traffic against the gateway in front of emulators, checking that nothing
leaks (RSS, open file descriptors) and that every counter adds up. ``python -m bench.soak``.
"""
