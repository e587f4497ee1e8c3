"""The acceptance run for a new node: doctor, bench, compare, workload seeds, verify, plan cost,
report, and a certificate that can be checked (and signed) later."""
