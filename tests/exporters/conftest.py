"""The exporters tier: numapin's series read by their real consumers, Debian's ``prometheus`` (2.42)
scraping ``numapin exporter`` and Debian's ``prometheus-node-exporter`` (1.5) serving ``ps --textfile``.

Run with ``python -m pytest tests/exporters`` after ``apt-get install prometheus
prometheus-node-exporter``. Without them it skips with one line saying what to install; with ``CI``
set it fails instead.
"""
