"""``make bench``: tasklease end to end against the broker's and the database's own limits,
and against Celery (issue 6, "The benchmark"). See bench/run.py."""
