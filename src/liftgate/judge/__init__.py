"""The ``judge`` stage: what the code behind an excluded gate really needs, and can the target run it.

- `catalog`: the hardware-feature catalog (``data/features.json``): each feature's evidence in
  source text and the exact compile targets whose ``ptxas`` assembles it;
- `region`: what a gated region uses (features, calls, shared-memory sizes);
- `verdict`: liftable, blocked or unknown for a target, with the hazards of the exclusion.
"""
