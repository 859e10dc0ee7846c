"""The verify stage: did the lift work, and is it better? A/B runs of the user's command, stock
against lifted (`runner`), with NVML telemetry (`telemetry`), metrics (`metrics`), output
comparison (`compare`) and a report (`report`)."""
