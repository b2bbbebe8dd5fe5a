"""Stage 3: run a LaunchPlan. A RankRunner per job (this host's agent in-process, or every
host's agent over SSH) feeds the supervisor's loop with events; the supervisor applies the job's
policy (fail fast, restarts) and writes the job directory.
"""
