"""Pure text edits that lift a gate, shared by the judge (compile checks) and the lift stage.

`cuda` rewrites a CUDA preprocessor directive. Nothing here reads files or imports a later
stage: text in, text out.
"""
