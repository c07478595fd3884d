"""The notebook and Python SDK for PetsTrainingJobs: submit, follow and plot jobs, ship a function.

`client` (PetsTrainingJobClient, PetsTrainingJob), `launcher` (cluster_launcher) and `progress`
(the live display). It imports `pets_api` and the official `kubernetes` client, never the controller.
"""
