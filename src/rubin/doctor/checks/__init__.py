"""The checks, one module per concept. Importing a module registers its checks (``registry.check``)."""
