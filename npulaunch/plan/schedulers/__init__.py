"""The batch schedulers npulaunch runs under, one module each (``slurm``, ``mpi``, ``volcano``, ``k8s``): what
its environment says of the job (``view``, ``detect``), its batch script, and the cluster config as it
allocated it (``allocation``); ``rendezvous``: what the nodes of a scheduler's job exchange. Pure.
"""
