"""The agent: starts and owns the rank processes of one host (standard library, Python 3.7+)."""
