"""Stage 1: YAML text -> a validated ClusterConfig (source marks, sections, values, rules,
command-line overrides, and the catalog of session options and environment variables).
Pure: reads the YAML file and nothing else; imports only ``npulaunch.host`` below it.
"""
