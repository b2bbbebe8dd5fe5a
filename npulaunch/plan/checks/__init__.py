"""The checks before anything starts: this machine's (``preflight``), every remote host's (``remote``), every
NPU's health and what must agree across hosts (``health``, ``crosshost``), the NPUs' network (``net``), and
what they found, as values (``findings``). Pure but for ``preflight``, which reads the local filesystem.
"""
