"""Sia / Pollux per-type profiles (T2.3, docs/datasets.md) turned into Pollux goodput models
(A5.1, docs/policies/sia.md), the input the `sia` and `pollux` policies consume (`PolluxJobModel`,
or per-configuration goodput evaluated from it).

Files of one application directory (`../shared/reference/traces/sia_profiles/<app>/`):

* `placements-<gpu>.csv`: `placement, local_bsz, step_time, sync_time`; the placement is a digit
  string, one digit per node = replicas on it (nodes = digits, replicas = their sum);
* `scalability-<gpu>.csv`: `num_nodes, num_replicas, local_bsz, step_time, sync_time`;
* `validation-<bsz>.csv`: `progress, iteration, metric, grad_sqr, grad_var`, one row per epoch.

Times are s per optimizer step; `step_time` includes `sync_time` (Sia's simulator uses
`step_time - sync_time` as the time of one accumulation step, and `step_time` as the optimizer
step), so the fit sees T_c = step_time - sync_time and T_o = step_time. Rows with
step_time <= sync_time (the pipeline-parallel `gpt_pmp` profiles use other semantics) are
dropped and counted. As in Sia's simulator, the baseline batch M0 is the smallest validated
batch size, M_max the largest, the atomic batch limits those profiled, and the gradient
statistics (sqr, var) those of the M0 validation file at the requested epoch.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.optimize import Bounds, minimize

from apportion.solver.model import FloatArray, PerfParams, PolluxJobModel

SEED_TYPE_ALIASES: Mapping[str, str] = {"aws": "t4", "azure": "v100", "dgx-ext": "dgx"}
"""Sia profile GPU keys -> the `gpu_type` names of the 1-GPU seed profiles (T2.3, docs/datasets.md:
aws = T4, azure = V100, dgx / dgx-ext = A100; rtx and quad are spelled alike)."""


@dataclass(frozen=True)
class StepTimes:
    """Profiled step times of one application on one GPU type."""

    nodes: FloatArray
    """Nodes used."""
    replicas: FloatArray
    """GPUs (data-parallel replicas) used."""
    local_bsz: FloatArray
    """Atomic (per-GPU) batch, samples."""
    accum_time: FloatArray
    """s per accumulation (compute) step = step_time - sync_time."""
    optim_time: FloatArray
    """s per optimizer step = step_time."""


@dataclass(frozen=True)
class GradStats:
    """Gradient statistics of one validation file, one entry per epoch."""

    progress: FloatArray
    """Training progress at the end of the epoch (statistically efficient samples)."""
    grad_sqr: FloatArray
    """|E g|^2."""
    grad_var: FloatArray
    """tr(Sigma)."""


@dataclass(frozen=True)
class AppProfiles:
    """Every profile of one application."""

    name: str
    times: dict[str, StepTimes]
    """Per GPU key (aws, azure, dgx, dgx-ext, quad, rtx)."""
    validation: dict[int, GradStats]
    """Per validated global batch size (samples)."""
    dropped_rows: int = 0
    """Rows with step_time <= sync_time (not usable for the fit)."""
    fitted: dict[str, PerfParams] = field(default_factory=dict, compare=False)
    """Cache of `perf_params` results."""

    @property
    def init_batch_size(self) -> int:
        """M0: the smallest validated batch (samples)."""
        return min(self.validation)

    @property
    def max_batch_size(self) -> int:
        """M_max: the largest validated batch (samples)."""
        return max(self.validation)

    def local_batch_range(self, gpu_type: str) -> tuple[int, int]:
        """(smallest, largest) profiled atomic batch on the type (samples)."""
        bsz = self.times[gpu_type].local_bsz
        return int(bsz.min()), int(bsz.max())

    def perf_params(self, gpu_type: str) -> PerfParams:
        """The fitted throughput model of the type (cached)."""
        if gpu_type not in self.fitted:
            t = self.times[gpu_type]
            self.fitted[gpu_type] = fit_perf_params(
                t.nodes, t.replicas, t.local_bsz, t.accum_time, t.optim_time
            )
        return self.fitted[gpu_type]

    def grad_stats(self, epoch: int = 0) -> tuple[float, float]:
        """(sqr, var) at M0 during `epoch` (clamped to the profiled epochs)."""
        stats = self.validation[self.init_batch_size]
        k = min(max(epoch, 0), stats.grad_sqr.size - 1)
        return float(stats.grad_sqr[k]), float(stats.grad_var[k])

    def job_model(self, type_names: Sequence[str], epoch: int = 0) -> PolluxJobModel:
        """A job of this application at `epoch` on a cluster with `type_names`: one fitted
        model row per type the application was profiled on (NaN rows elsewhere), batch limits
        of Sia's simulator; the largest atomic batch is the smallest of the per-type maxima
        (one limit per job: a batch every profiled type of the cluster can hold)."""
        perf = np.full((len(type_names), 7), np.nan)
        lows: list[int] = []
        highs: list[int] = []
        for j, name in enumerate(type_names):
            if name not in self.times:
                continue
            theta = self.perf_params(name)
            perf[j] = [
                theta.alpha_c,
                theta.beta_c,
                theta.alpha_n,
                theta.beta_n,
                theta.alpha_r,
                theta.beta_r,
                theta.gamma,
            ]
            lo, hi = self.local_batch_range(name)
            lows.append(lo)
            highs.append(hi)
        if not lows:
            raise ValueError(f"{self.name}: no profile for any of {', '.join(type_names)}")
        sqr, var = self.grad_stats(epoch)
        return PolluxJobModel(
            perf_params=perf,
            grad_sqr=sqr,
            grad_var=var,
            init_batch_size=self.init_batch_size,
            max_batch_size=self.max_batch_size,
            min_local_batch_size=max(min(lows), 1),
            max_local_batch_size=max(min(highs), min(lows), 1),
        )


def _rows(path: Path, columns: Sequence[str]) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
        return list(reader)


def _float(path: Path, line: int, row: dict[str, str], column: str) -> float:
    try:
        value = float(row[column])
    except (TypeError, ValueError):
        raise ValueError(
            f"{path}:{line}: column {column!r}: not a number: {row[column]!r}"
        ) from None
    if not math.isfinite(value):
        raise ValueError(f"{path}:{line}: column {column!r}: must be finite, got {value}")
    return value


def _add(
    cols: list[list[float]], nodes: float, replicas: float, bsz: float, step: float, sync: float
) -> int:
    """Append one observation (nodes, replicas, bsz, accumulation time, optimizer time);
    1 when the row is not usable (step_time <= sync_time, no batch, no replica), else 0."""
    if step <= sync or step <= 0 or bsz < 1 or replicas < 1 or nodes < 1:
        return 1
    for target, value in zip(cols, (nodes, replicas, bsz, step - sync, step), strict=True):
        target.append(value)
    return 0


def read_app_profiles(directory: str | Path, types: Sequence[str] | None = None) -> AppProfiles:
    """Read one application directory (placements, scalability and validation files); `types`
    restricts the GPU keys read. The unsuffixed files duplicate `aws` and are skipped."""
    root = Path(directory)
    times: dict[str, StepTimes] = {}
    dropped = 0
    for path in sorted(root.glob("placements-*.csv")):
        key = path.stem.split("-", 1)[1]
        if types is not None and key not in types:
            continue
        cols: list[list[float]] = [[], [], [], [], []]
        fields: tuple[str, ...] = ("placement", "local_bsz", "step_time", "sync_time")
        for line, row in enumerate(_rows(path, fields), start=2):
            digits = [int(c) for c in row["placement"].strip() if c.isdigit() and c != "0"]
            if not digits:
                raise ValueError(f"{path}:{line}: placement {row['placement']!r} has no replica")
            dropped += _add(
                cols,
                float(len(digits)),
                float(sum(digits)),
                *(_float(path, line, row, c) for c in fields[1:]),
            )
        scal = root / f"scalability-{key}.csv"
        if scal.is_file():
            fields = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
            for line, row in enumerate(_rows(scal, fields), start=2):
                dropped += _add(cols, *(_float(scal, line, row, c) for c in fields))
        if cols[0]:
            arrays = [np.asarray(c, np.float64) for c in cols]
            times[key] = StepTimes(*arrays)
    validation: dict[int, GradStats] = {}
    for path in sorted(root.glob("validation-*.csv")):
        try:
            bsz = int(path.stem.split("-", 1)[1])
        except ValueError:
            raise ValueError(f"{path}: expected validation-<batch size>.csv") from None
        fields = ("progress", "grad_sqr", "grad_var")
        rows = _rows(path, fields)
        values = [
            [_float(path, line, row, c) for c in fields] for line, row in enumerate(rows, start=2)
        ]
        arr = np.asarray(values, np.float64).reshape(-1, 3)
        validation[bsz] = GradStats(arr[:, 0], arr[:, 1], arr[:, 2])
    if not times:
        raise FileNotFoundError(f"{root}: no usable placements-<gpu>.csv")
    if not validation:
        raise FileNotFoundError(f"{root}: no validation-<bsz>.csv")
    return AppProfiles(root.name, times, validation, dropped)


def read_profile_library(
    root: str | Path, apps: Sequence[str] | None = None, types: Sequence[str] | None = None
) -> dict[str, AppProfiles]:
    """Every application directory under `root` (sia_profiles/) that has profiles for all of
    `types` (when given); e.g. gpt_pmp (dgx-ext and rtx only) is left out for aws."""
    out: dict[str, AppProfiles] = {}
    for directory in sorted(p for p in Path(root).iterdir() if p.is_dir()):
        if apps is not None and directory.name not in apps:
            continue
        app = read_app_profiles(directory, types)
        if types is None or all(t in app.times for t in types):
            out[app.name] = app
    return out


def _objective(
    params: FloatArray,
    nodes: FloatArray,
    replicas: FloatArray,
    local_bsz: FloatArray,
    log_accum: FloatArray,
    log_optim: FloatArray,
) -> tuple[float, FloatArray]:
    """Pollux's fit objective (A5.1) and its exact gradient in the 7 parameters."""
    a_c, b_c, a_n, b_n, a_r, b_r, g = map(float, params)
    extra = np.maximum(replicas - 2.0, 0.0)
    multi = (nodes > 1) & (replicas > 1)
    single = (nodes <= 1) & (replicas > 1)
    t_c = a_c + b_c * local_bsz
    t_n = np.where(multi, a_n + b_n * extra, np.where(single, a_r + b_r * extra, 0.0))
    pc = t_c**g
    tn_safe = np.where(t_n > 0, t_n, 1.0)  # rows without network time: T_n = 0
    pn = np.where(t_n > 0, tn_safe**g, 0.0)
    total = pc + pn
    log_o = np.log(total) / g
    r_c = np.log(t_c) - log_accum
    r_o = log_o - log_optim
    size = float(local_bsz.size)
    err_c = math.sqrt(float(np.mean(r_c**2)) + 1e-30)
    err_o = math.sqrt(float(np.mean(r_o**2)) + 1e-30)
    value = err_c + err_o + 1e-3 * (g - 1.0) ** 2
    value += 1e-2 * ((b_n / a_n) ** 2 + (b_r / a_r) ** 2)
    # d err / d x = mean(r * d r / d x) / err
    w_c = r_c / (size * err_c)
    w_o = r_o / (size * err_o)
    dlogo_dtc = pc / (t_c * total)
    dlogo_dtn = np.where(t_n > 0, pn / (tn_safe * total), 0.0)
    coef_tc = w_c / t_c + w_o * dlogo_dtc
    coef_tn = w_o * dlogo_dtn
    log_tn = np.log(tn_safe)
    dlogo_dg = -np.log(total) / g**2 + (pc * np.log(t_c) + pn * log_tn) / (g * total)
    grad = np.asarray(
        [
            float(coef_tc.sum()),
            float((coef_tc * local_bsz).sum()),
            float(coef_tn[multi].sum()) - 2e-2 * b_n**2 / a_n**3,
            float((coef_tn * extra)[multi].sum()) + 2e-2 * b_n / a_n**2,
            float(coef_tn[single].sum()) - 2e-2 * b_r**2 / a_r**3,
            float((coef_tn * extra)[single].sum()) + 2e-2 * b_r / a_r**2,
            float((w_o * dlogo_dg).sum()) + 2e-3 * (g - 1.0),
        ]
    )
    return value, grad


def _line(x: FloatArray, y: FloatArray) -> tuple[float, float]:
    """Least-squares intercept and slope of y over x (slope 0 for a single x), clipped at
    1e-8."""
    if x.size == 0:
        return 1e-1, 1e-2
    if np.unique(x).size < 2:
        return max(float(y.mean()), 1e-8), 1e-8
    slope, intercept = np.polyfit(x, y, 1)
    return max(float(intercept), 1e-8), max(float(slope), 1e-8)


def _starts(
    x0: FloatArray,
    free: np.ndarray,
    n: FloatArray,
    k: FloatArray,
    m: FloatArray,
    acc: FloatArray,
    opt: FloatArray,
) -> list[FloatArray]:
    """Starting points: adaptdl's (x0), then data-driven ones (compute line of T_c over m,
    network lines of (T_o^gamma - T_c^gamma)^(1/gamma) over max(K - 2, 0) for multi-node and
    single-node rows) for gamma in 1, 1.5, 2, 3, 5; the fit keeps the lowest objective (the
    objective is not convex, adaptdl's single start can end in a poor local minimum)."""
    a_c, b_c = _line(m, acc)
    extra = np.maximum(k - 2.0, 0.0)
    multi, single = n > 1, (n == 1) & (k > 1)
    starts = [x0.copy()]
    for gamma in (1.0, 1.5, 2.0, 3.0, 5.0):
        t_n = np.maximum(opt**gamma - acc**gamma, 1e-24) ** (1.0 / gamma)
        a_n, b_n = _line(extra[multi], t_n[multi])
        a_r, b_r = _line(extra[single], t_n[single])
        guess = np.asarray([a_c, b_c, a_n, b_n, a_r, b_r, gamma])
        starts.append(np.where(free, guess, x0))
    return starts


def fit_perf_params(
    nodes: FloatArray,
    replicas: FloatArray,
    local_bsz: FloatArray,
    accum_time: FloatArray,
    optim_time: FloatArray,
) -> PerfParams:
    """Pollux's fit (A5.1): L-BFGS-B on the RMS log error of the accumulation-step (s) and
    optimizer-step (s) times plus 1e-3 (gamma - 1)^2 + 1e-2 ((beta_n/alpha_n)^2 +
    (beta_r/alpha_r)^2); alphas and betas in [1e-8, inf), gamma in [1, 10]; start
    (0.1, 0.01) x 3 and gamma 1.001, plus the data-driven starts of `_starts` (exact gradient,
    best objective kept). Unobserved parameters are frozen at their lower bound as adaptdl
    does: alpha_n, beta_n without multi-node rows; alpha_r, beta_r without single-node
    multi-replica rows; beta_n, beta_r without rows of more than 2 replicas; alpha_c is pinned
    to half the mean accumulation time when one batch size was seen. Without multi-node rows
    alpha_n, beta_n are raised to at least 1.1 x alpha_r, beta_r afterwards."""
    n = np.asarray(nodes, np.float64)
    k = np.asarray(replicas, np.float64)
    m = np.asarray(local_bsz, np.float64)
    acc = np.asarray(accum_time, np.float64)
    opt = np.asarray(optim_time, np.float64)
    if not (n.size == k.size == m.size == acc.size == opt.size) or n.size == 0:
        raise ValueError("need equally long, non-empty observation arrays")
    if (acc <= 0).any() or (opt <= 0).any():
        raise ValueError("step times must be > 0")
    x0 = np.asarray([1e-1, 1e-2] * 3 + [1.0 + 1e-3])
    lower = np.asarray([1e-8] * 6 + [1.0])
    upper = np.asarray([np.inf] * 6 + [10.0])

    def freeze(index: int, value: float) -> None:
        x0[index] = lower[index] = upper[index] = value

    if np.unique(m).size == 1:
        freeze(0, float(acc.mean()) / 2.0)
    if not (n > 1).any():
        freeze(2, 1e-8)
        freeze(3, 1e-8)
    if not ((n == 1) & (k > 1)).any():
        freeze(4, 1e-8)
        freeze(5, 1e-8)
    if not (k > 2).any():
        freeze(3, 1e-8)
        freeze(5, 1e-8)
    free = lower < upper
    fixed = x0.copy()

    log_acc, log_opt = np.log(acc), np.log(opt)

    def objective(z: FloatArray) -> tuple[float, FloatArray]:
        full = fixed.copy()
        full[free] = z
        value, grad = _objective(full, n, k, m, log_acc, log_opt)
        return value, grad[free]

    best: tuple[float, FloatArray] | None = None
    for start in _starts(x0, free, n, k, m, acc, opt):
        result = minimize(
            objective,
            np.clip(start[free], lower[free], upper[free]),
            method="L-BFGS-B",
            jac=True,
            bounds=Bounds(lower[free], upper[free], keep_feasible=True),
            # tight tolerances (the RMS terms are not smooth at an exact fit) but at most 300
            # iterations per start: about 0.1 s per (application, type) on the real profiles
            options={"maxiter": 300, "ftol": 1e-12, "gtol": 1e-10},
        )
        if best is None or float(result.fun) < best[0]:
            best = (float(result.fun), np.asarray(result.x, np.float64))
    assert best is not None
    params = fixed.copy()
    params[free] = best[1]
    if not (n > 1).any():
        params[2] = max(params[2], 1.1 * params[4])
        params[3] = max(params[3], 1.1 * params[5])
    return PerfParams(*map(float, params))


def seed_throughput(
    gpu_type: Sequence[str], local_bsz: FloatArray, step_time: FloatArray, target: str
) -> float:
    """1-GPU throughput (samples/s) of one seed profile (A5.3) on `target` at its largest
    profiled local batch: local_bsz / step_time (step_time includes the sync time, as in the
    other profiles); 0 when the type has no row."""
    rows = [k for k, t in enumerate(gpu_type) if t == target]
    if not rows:
        return 0.0
    best = max(rows, key=lambda k: (float(local_bsz[k]), -float(step_time[k])))
    return float(local_bsz[best]) / float(step_time[best])
