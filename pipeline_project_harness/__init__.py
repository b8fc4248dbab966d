"""What the fault tests and the benchmarks share: throw-away stacks, fault injection, trials and their invariants
(`reliability`), cluster trials (`cluster`), and the whole-batch cleaning stand-ins (`standins`).

Not part of the product: nothing in `pipeline_project` imports it.
"""
