"""What people read: the plan, the console and live view, status and report of a job directory,
the catalog tables. Rendering only: nothing here decides or starts anything.
"""
