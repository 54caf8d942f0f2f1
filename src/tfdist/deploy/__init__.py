"""Generators for what runs a job elsewhere: lock files, Dockerfiles, GPU set-up scripts, Kubernetes and Slurm.

Each module is pure (typed spec in, text out); the CLI writes the files.
"""
