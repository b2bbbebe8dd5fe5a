"""What runs on a compute host beside the ranks: the agent, the rank-side session helper and its
injection hook, and the vocabulary they share with the launcher (specs, events, records, errors).
Standard library only, Python 3.7+; nothing here imports from outside ``npulaunch.host``. The
launcher ships this folder whole to hosts it reaches over SSH.
"""
