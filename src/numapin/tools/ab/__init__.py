"""``numapin ab``: which placement is fastest for this workload on this host, measured, with the odds.

:mod:`.runs` runs the user's command under each variant (a set of ``numapin exec`` options) in
randomised blocks and reads each run's value; :mod:`.stats` holds the statistics; :mod:`.report`
turns the runs into medians, intervals, comparisons with the baseline and a recommendation;
:mod:`.picture` draws every run.
"""
