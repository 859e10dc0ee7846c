"""A/B runs of the user's command, stock against lifted, and the verdict.

The command runs alternately in the two states (``stock lifted stock lifted …``: K warm-ups of
each, then N measured runs of each), the state switched through the journal
(`liftgate.lift.journal.Journal.revert`/`reapply`), so every switch is as safe as ``lift`` and
``revert``. Each run records its exit status, wall time, metrics (`liftgate.verify.metrics`),
GPU telemetry (`liftgate.verify.telemetry`) and copies of the files named for comparison.

The verdict: ``failure`` when a lifted run crashed, exited non-zero, printed "no kernel image",
or wrote output that differs from the stock run's beyond tolerance, whatever its speed;
``regression`` when the primary metric is worse lifted by more than the threshold and the two
states' ranges do not overlap; ``pass`` otherwise (with a plain note when the difference is
within noise). A stock run that fails makes the check itself unusable: an error, not a verdict.

Each run's command leads a process group of its own (`liftgate.procgroup`), its output going
straight to the run's log: on ``--timeout`` the whole group gets SIGTERM, then SIGKILL after
`GRACE_S` seconds, so a shell's background children do not outlive the run; a Ctrl-C is
passed on to the group (SIGINT, then the same escalation) before verify stops.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from liftgate import procgroup
from liftgate.verify.compare import Comparison, compare_files
from liftgate.verify.metrics import MetricSpec, collect, higher_is_better
from liftgate.verify.telemetry import Sampler

STATES = ("stock", "lifted")
NO_KERNEL = (
    "no kernel image is available",
    "CUDA_ERROR_NO_BINARY_FOR_GPU",
    "cudaErrorNoKernelImageForDevice",
)
EXIT = {"pass": 0, "failure": 1, "regression": 3}
GRACE_S = 5.0  # between SIGTERM and SIGKILL when a run times out


class VerifyError(Exception):
    """The check cannot give a verdict (the stock run fails, the lift cannot be switched): one line."""


@dataclass
class Run:
    state: str
    index: int
    warmup: bool
    returncode: int
    wall_s: float
    metrics: dict[str, float]
    telemetry: dict[str, Any]
    log: str
    outputs: dict[str, str] = field(default_factory=dict)  # compared file -> its copy
    failure: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state, "index": self.index, "warmup": self.warmup, "returncode": self.returncode,
            "wall_s": self.wall_s, "metrics": self.metrics, "telemetry": self.telemetry, "log": self.log,
            "failure": self.failure,
        }  # fmt: skip


@dataclass
class Options:
    command: Sequence[str]
    runs: int = 3
    warmup: int = 1
    metrics: Sequence[MetricSpec] = ()
    result_files: Sequence[str] = ()
    compare: Sequence[str] = ()
    rtol: float = 1e-5
    atol: float = 1e-8
    threshold: float = 0.03
    timeout_s: float | None = None
    workdir: str = "liftgate-verify"
    interval_s: float = 0.05


def _stats(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def _telemetry_values(run: Run) -> dict[str, float]:
    """The numbers of a run's telemetry that go into the per-state statistics."""
    total = run.telemetry.get("total", {})
    out = {}
    for key in ("power_w_mean", "energy_j", "sm_util_mean"):
        if isinstance(total.get(key), (int, float)):
            out[key] = float(total[key])
    for gpu in run.telemetry.get("gpus", []):
        for key in (
            "power_w_mean",
            "power_pct_mean",
            "sm_util_mean",
            "mem_util_mean",
            "sm_clock_mhz_mean",
            "mem_used_mib_max",
            "temp_c_max",
            "energy_j",
        ):
            value = gpu.get(key)
            if isinstance(value, (int, float)):
                out[f"gpu{gpu['index']}.{key}"] = float(value)
    return out


def run_command(
    opts: Options,
    state: str,
    index: int,
    warmup: bool,
    environ: Mapping[str, str],
    sampler: Callable[[], Sampler],
) -> Run:
    run_dir = os.path.join(opts.workdir, f"{'warmup' if warmup else 'run'}{index:02d}-{state}")
    os.makedirs(run_dir, exist_ok=True)
    env = dict(environ)
    env.update(
        LIFTGATE_VERIFY_STATE=state,
        LIFTGATE_VERIFY_RUN=str(index),
        LIFTGATE_VERIFY_DIR=os.path.abspath(run_dir),
    )
    for path in opts.compare:
        if os.path.exists(path):
            os.unlink(path)  # a file left by the previous run must not pass for this run's output
    log = os.path.join(run_dir, "output.log")
    started = time.perf_counter()
    with sampler() as telemetry, open(log, "wb") as out:
        try:
            proc = procgroup.start(opts.command, stdout=out, stderr=subprocess.STDOUT, env=env)
        except OSError as exc:
            raise VerifyError(f"cannot run {opts.command[0]}: {exc.strerror or exc}") from exc
        try:
            with procgroup.forwarding(proc):
                code = procgroup.wait(proc, opts.timeout_s)
        except subprocess.TimeoutExpired:
            procgroup.stop(proc, signal.SIGTERM, GRACE_S)
            code = -9
        except KeyboardInterrupt:
            procgroup.stop(proc, signal.SIGINT, GRACE_S)
            raise
        except procgroup.Terminated as exc:
            procgroup.stop(proc, exc.signum, GRACE_S)
            raise SystemExit(128 + exc.signum) from None
    wall = time.perf_counter() - started
    with open(log, "rb") as fh:
        text = fh.read().decode("utf-8", "replace")
    run = Run(
        state,
        index,
        warmup,
        code,
        wall,
        collect(text, list(opts.metrics), list(opts.result_files)),
        telemetry.summary(),
        log,
    )
    for path in opts.compare:
        if os.path.exists(path):
            copy = os.path.join(run_dir, os.path.basename(path))
            shutil.copyfile(path, copy)
            run.outputs[path] = copy
    if code == -9:
        run.failure = f"timed out after {opts.timeout_s:g} s"
    elif code != 0:
        run.failure = f"exit status {code}"
    if any(marker in text for marker in NO_KERNEL):
        run.failure = "no kernel image for the device" + (f" (exit status {code})" if code else "")
    tokens, energy = run.metrics.get("output_throughput"), run.telemetry.get("total", {}).get("energy_j")
    if tokens and energy:
        run.metrics["tokens_per_j"] = tokens * wall / energy
    return run


@dataclass
class Outcome:
    verdict: str
    reasons: list[str]
    runs: list[Run]
    primary: str
    summary: dict[str, Any]
    comparisons: list[Comparison]
    notes: list[str]
    final_state: str = "lifted"

    @property
    def exit_code(self) -> int:
        return EXIT[self.verdict]

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict, "exit_code": self.exit_code, "reasons": self.reasons, "primary_metric": self.primary,
            "summary": self.summary, "final_state": self.final_state, "notes": self.notes,
            "comparisons": [{"path": c.path, "equal": c.equal, "detail": c.detail} for c in self.comparisons],
            "runs": [r.to_dict() for r in self.runs],
        }  # fmt: skip


def summarize(runs: Sequence[Run], threshold: float) -> tuple[dict[str, Any], str]:
    """Per state: median/min/max of wall time, metrics and telemetry; ratios and noise. And the primary metric."""
    measured = {s: [r for r in runs if r.state == s and not r.warmup and r.failure is None] for s in STATES}
    telemetry = {id(r): _telemetry_values(r) for r in runs}
    names: dict[str, None] = {"wall_s": None}
    for r in runs:
        names.update(dict.fromkeys(r.metrics))
        names.update(dict.fromkeys(telemetry[id(r)]))
    primary = next(
        (
            n
            for n in names
            if n not in ("wall_s",)
            and not n.startswith(("gpu", "power", "energy", "sm_util"))
            and n != "tokens_per_j"
        ),
        "wall_s",
    )
    table: dict[str, Any] = {}
    for name in names:
        per_state = {}
        for s in STATES:
            values = []
            for r in measured[s]:
                v = r.wall_s if name == "wall_s" else r.metrics.get(name, telemetry[id(r)].get(name))
                if v is not None:
                    values.append(v)
            per_state[s] = _stats(values)
        row: dict[str, Any] = {"higher_is_better": higher_is_better(name), **per_state}
        a, b = per_state["stock"], per_state["lifted"]
        if a and b and a["median"]:
            row["ratio"] = b["median"] / a["median"]
            row["spread"] = {
                s: (p["max"] - p["min"]) / p["median"] if p["median"] else None
                for s, p in per_state.items()
                if p
            }
            row["within_noise"] = not (b["max"] < a["min"] or b["min"] > a["max"])
            row["threshold"] = threshold
        table[name] = row
    return table, primary


def decide(
    runs: Sequence[Run],
    comparisons: Sequence[Comparison],
    table: Mapping[str, Any],
    primary: str,
    threshold: float,
) -> tuple[str, list[str]]:
    failed = [r for r in runs if r.state == "lifted" and r.failure]
    reasons = [
        f"lifted run {r.index}{' (warm-up)' if r.warmup else ''}: {r.failure} (log: {r.log})" for r in failed
    ]
    reasons += [f"{c.path}: {c.detail}" for c in comparisons if not c.equal]
    if reasons:
        return "failure", reasons
    row = table.get(primary, {})
    ratio = row.get("ratio")
    if ratio is None:
        return "pass", [f"no measured value of {primary} in both states: nothing to compare"]
    better = row["higher_is_better"]
    change = ratio - 1.0 if better else 1.0 - ratio  # > 0: the lifted state is better
    what = f"{primary}: lifted/stock = {ratio:.3f} (median {row['lifted']['median']:.4g} vs {row['stock']['median']:.4g})"
    if change < -threshold and not row["within_noise"]:
        return "regression", [
            f"{what}: worse by {abs(change):.1%}, beyond the {threshold:.0%} threshold and the runs' spread"
        ]
    if row["within_noise"]:
        return "pass", [f"{what}: within noise (the two states' ranges overlap)"]
    return "pass", [f"{what}: {'better' if change > 0 else 'worse'} by {abs(change):.1%}"]


def verify(
    opts: Options,
    switch: Callable[[str], None],
    current: str,
    *,
    environ: Mapping[str, str] | None = None,
    sampler: Callable[[], Sampler] | None = None,
    progress: Callable[[str], None] = lambda msg: None,
) -> Outcome:
    """Run the A/B schedule. ``switch(state)`` puts the environment in ``state``; ``current`` is its state now."""
    env = dict(environ if environ is not None else os.environ)
    make_sampler = sampler or (lambda: Sampler(opts.interval_s))
    state = current
    runs: list[Run] = []
    schedule = [(i, True) for i in range(opts.warmup)] + [(i, False) for i in range(opts.runs)]
    notes: list[str] = []
    for index, warmup in schedule:
        for target in STATES:
            if state != target:
                switch(target)
                state = target
            progress(f"{'warm-up' if warmup else 'run'} {index + 1} {target}")
            run = run_command(opts, target, index, warmup, env, make_sampler)
            runs.append(run)
            if target == "stock" and run.failure:
                raise VerifyError(
                    f"the command fails in the stock state too ({run.failure}; log: {run.log}): "
                    f"fix the check before judging the lift; its output ends:\n{_tail(run.log)}"
                )
    first = runs[0].telemetry.get("note") if runs else None
    if first:
        notes.append(first)
    comparisons: list[Comparison] = []
    stock_runs = [r for r in runs if r.state == "stock" and not r.warmup]
    reference = stock_runs[0] if stock_runs else None
    for path in opts.compare:
        if reference is None or path not in reference.outputs:
            comparisons.append(Comparison(os.path.basename(path), False, "the stock run did not write it"))
            continue
        for r in stock_runs[1:]:
            if (
                path in r.outputs
                and not compare_files(reference.outputs[path], r.outputs[path], opts.rtol, opts.atol).equal
            ):
                notes.append(
                    f"{os.path.basename(path)} differs between stock runs: the command is not deterministic at this tolerance"
                )
                break
        for r in runs:
            if r.state == "lifted" and not r.warmup:
                c = compare_files(
                    reference.outputs[path],
                    r.outputs.get(path, os.path.join(opts.workdir, "missing")),
                    opts.rtol,
                    opts.atol,
                )
                comparisons.append(Comparison(f"{c.path} (run {r.index})", c.equal, c.detail))
    table, primary = summarize(runs, opts.threshold)
    verdict, reasons = decide(runs, comparisons, table, primary, opts.threshold)
    return Outcome(verdict, reasons, runs, primary, table, comparisons, notes, final_state=state)


def _tail(path: str, lines: int = 8) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return "  (no log)"
    return "\n".join("  " + line for line in text.rstrip().splitlines()[-lines:])


def plot(outcome: Outcome, path: str) -> str | None:
    """A PNG of the primary metric and total GPU power per run and state (the ``plot`` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: pip install 'liftgate[plot]' for --plot"
    measured = [r for r in outcome.runs if not r.warmup]

    def primary(r: Run) -> float | None:
        return r.wall_s if outcome.primary == "wall_s" else r.metrics.get(outcome.primary)

    def power(r: Run) -> float | None:
        value = r.telemetry.get("total", {}).get("power_w_mean")
        return float(value) if isinstance(value, (int, float)) else None

    charts: list[tuple[str, Callable[[Run], float | None]]] = [
        (outcome.primary, primary),
        ("GPU power, W (all GPUs)", power),
    ]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, (label, value) in zip(axes, charts, strict=True):
        for state, colour in zip(STATES, ("tab:blue", "tab:orange"), strict=True):
            points = [(r.index + 1, v) for r in measured if r.state == state and (v := value(r)) is not None]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, "o-", color=colour, label=state)
        ax.set_xticks(range(1, max((r.index for r in measured), default=0) + 2))
        ax.set_xlabel("run")
        ax.set_title(label)
        ax.legend()
    fig.suptitle(f"liftgate verify: {outcome.verdict}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


__all__ = ["EXIT", "Options", "Outcome", "VerifyError", "plot", "verify"]
