"""The deploy tier: numapin's Kubernetes manifests validated against the Kubernetes API's own schema
(``kubernetes-validate``, offline), and the container image's recipe carried out step by step on this host.

Run with ``pip install '.[deploy]' && python -m pytest tests/deploy``. Without the validator it skips with
one line saying what to install; with ``CI`` set it fails instead.
"""
