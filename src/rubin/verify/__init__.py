"""Did the move change convergence? ``verify(baseline_dirs, new_dirs)`` picks exact, curve or
statistical from the inputs and returns one verdict with the reason, checked against rollback rules."""
