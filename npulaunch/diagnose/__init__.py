"""Stage 4: what the ranks reported -> the job's summary, its root cause and its exit code.
Pure: data in, data out (it reads the tails of log files, nothing else).
"""
