"""The pure decision core of Sluicegate.

Nothing in this package does I/O or reads the wall clock: the clock and a read-only
view of the backend fleet are passed in. The gateway, the simulator and the tests
run the very same code.
"""
