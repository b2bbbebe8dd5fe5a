"""How the launcher reaches the agents of the hosts other than its own: a transport (SSH: ``ssh``; Slurm's
job steps: ``srun``) gives a ``link`` to each host, the ``fleet`` reaches and checks every host before
anything starts, ``run`` runs each attempt over them, ``ship`` packages the agent."""
