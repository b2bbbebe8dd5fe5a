"""CANN's error codes: the catalog (generated from Huawei's sources), what the codes' structure says,
the shapes of the lines that carry them, and the findings the agent reports. Standard library only,
Python 3.7+: it runs beside the ranks."""
