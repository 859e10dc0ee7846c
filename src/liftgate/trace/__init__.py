"""Runtime tracing: which capability queries a real run makes, and which gates it evaluates.

``liftgate trace [--as ARCH] -o trace.json -- COMMAND`` runs a command with the tracer
(`liftgate.trace.runtime`) injected through ``sitecustomize``; `liftgate.trace.session` prepares
and runs it, `liftgate.trace.document` is the trace file, and `liftgate.trace.match` maps a
trace onto a static scan (``liftgate scan --trace trace.json``): the gates the run evaluated and
how, and the queries made where the scan found no gate.
"""
