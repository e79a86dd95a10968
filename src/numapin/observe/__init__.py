"""Looking at a process, apart from pinning one: the one judge of where a process should be and where it is
(:mod:`.judge`), and the words of its verdict (:mod:`.verdict`). Nothing here changes a process; what acts on
this one is :mod:`numapin.pinning`'s."""
