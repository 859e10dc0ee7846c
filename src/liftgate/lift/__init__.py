"""The lift stage: patch chosen gates so they also admit a target, reversibly.

`plan` builds a PatchPlan (pure: edits per file and their unified diff, re-detected before it is
trusted) from the language edits in `liftgate.edits.cuda`, `py_edit` and `cmake_edit`; `journal` applies
and reverts it atomically with backups and sha256 records in ``<prefix>/.liftgate``; `caches`
moves JIT-cache entries built from old sources aside; `workflow` ties these to a scan of an
environment, and exports and re-applies patch series.
"""
