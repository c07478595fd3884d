"""Build and test tooling (chart rendering, helm/kubectl and checkov fetching, generated docs).

A package so the tests import `hack.chart` and the Makefile runs `python -m hack.chart`; its
modules are never installed and nothing under operator/ or trainer_image/ imports them.
"""
