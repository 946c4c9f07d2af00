"""The snapshot builder's choices, importable without numpy (the command line lists them)."""

GPU_MODES = ("power-of-two", "exact")
"""`gpus`: "power-of-two" rounds a job's GPU count up to a power of two (fractions to 1) and
caps it at `max_scale_factor`, as Gavel's throughput tables are keyed; "exact" keeps it
(a fractional count excludes the job)."""
START_MODES = ("fifo", "arrival")
"""How a trace *without* start times gets them: "fifo" replays the jobs in arrival order on
the cluster's devices (a job starts when enough devices are free and every earlier job has
started); "arrival" assumes every job started when it arrived (more running jobs than the
cluster can hold). Traces with start times keep them; a job whose start alone is missing in a
trace that has them is assumed to run since its arrival (counted)."""
