"""The SSH backend: how the launcher reaches the agents of hosts other than its own."""
