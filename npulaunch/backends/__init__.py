"""Backends: how the launcher reaches the agents of hosts other than its own (SSH today)."""
