"""The browser tier: the plan's HTML page rendered by headless Chromium (Debian's ``chromium``).

Run with ``python -m pytest tests/browser`` after ``apt-get install chromium``. Without the
browser it skips with one line saying what to install; with ``CI`` set it fails instead.
"""
