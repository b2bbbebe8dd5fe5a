"""Stage 2: ClusterConfig + host facts + the scheduler's environment -> LaunchPlan (each rank's
environment and session options, the rank table, the job-directory layout), and the checks made
against the machine before anything starts. Starts no rank.
"""
