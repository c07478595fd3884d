"""Build and test tooling: the chart, helm/kubectl and checkov, generated docs, the supply chain.

A package so the tests import `hack.chart` and a module that imports another runs as
`python -m hack.<module>` from the repository root (the Makefile's way); its modules are never
installed and nothing under operator/ or trainer_image/ imports them.
"""
