"""Facts -> findings: the doctor's checks, the error knowledge base and ``--explain``."""
