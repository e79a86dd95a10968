"""The kubernetes tier: numapin's Kubernetes manifests validated against the Kubernetes API's own schema
(``kubernetes-validate``, offline), the container image's recipe carried out step by step on this host, and a
gRPC server speaking the kubelet's pod-resources v1 API on a Unix socket.

Run with ``pip install '.[kubetest]' && python -m pytest tests/kubernetes``. Without what it needs it skips
with one line saying what to install; with ``CI`` set it fails instead.
"""
