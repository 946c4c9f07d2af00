"""Sia / Pollux per-type profiles -> Pollux models (`apportion.datasets.sia_models`, T2.3,
docs/datasets.md; A5.1, docs/policies/sia.md): parsing of small hand-written profile files, the fit
recovering a known model from synthetic times, adaptdl's freezing rules, the 1-GPU seed throughput,
and the real profiles when ../shared/reference is present."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from apportion.datasets.sia_models import (
    fit_perf_params,
    read_app_profiles,
    read_profile_library,
    seed_throughput,
)
from apportion.formulations.pollux_model import (
    PerfParams,
    compute_time,
    network_time,
    optimizer_time,
    throughput,
)

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "reference"


def _write(path: Path, text: str) -> None:
    path.write_text(text.strip() + "\n", encoding="utf-8")


def test_read_app_profiles_small(tmp_path: Path) -> None:
    _write(
        tmp_path / "placements-rtx.csv",
        """
placement,local_bsz,step_time,sync_time
1,8,0.5,0.1
12,16,0.9,0.3
4,16,0.2,0.3
""",
    )
    _write(
        tmp_path / "scalability-rtx.csv",
        """
num_nodes,num_replicas,local_bsz,step_time,sync_time
4,16,8,1.0,0.6
""",
    )
    _write(tmp_path / "placements.csv", "placement,local_bsz,step_time,sync_time\n1,1,1,0\n")
    _write(
        tmp_path / "validation-32.csv",
        "progress,iteration,metric,grad_sqr,grad_var\n10,5,0.1,4.0,2.0\n20,9,0.2,3.0,6.0",
    )
    _write(
        tmp_path / "validation-8.csv",
        "progress,iteration,metric,grad_sqr,grad_var\n10,5,0.1,2.0,1.0\n20,9,0.2,1.0,5.0",
    )
    app = read_app_profiles(tmp_path)
    assert app.name == tmp_path.name
    assert list(app.times) == ["rtx"]  # the unsuffixed placements.csv is skipped
    rtx = app.times["rtx"]
    # "12" = 2 nodes, 3 replicas; the row with step_time < sync_time is dropped and counted.
    assert rtx.nodes.tolist() == [1, 2, 4]
    assert rtx.replicas.tolist() == [1, 3, 16]
    assert rtx.local_bsz.tolist() == [8, 16, 8]
    np.testing.assert_allclose(rtx.accum_time, [0.4, 0.6, 0.4])  # step_time - sync_time
    np.testing.assert_allclose(rtx.optim_time, [0.5, 0.9, 1.0])  # step_time
    assert app.dropped_rows == 1
    assert (app.init_batch_size, app.max_batch_size) == (8, 32)
    assert app.local_batch_range("rtx") == (8, 16)
    assert app.grad_stats(0) == (2.0, 1.0)  # M0 = 8's file, epoch 0
    assert app.grad_stats(7) == (1.0, 5.0)  # clamped to the last epoch
    model = app.job_model(("aws", "rtx"), epoch=1)
    assert np.isnan(model.perf_params[0]).all() and np.isfinite(model.perf_params[1]).all()
    assert (model.grad_sqr, model.grad_var) == (1.0, 5.0)
    assert (model.init_batch_size, model.max_batch_size) == (8, 32)
    assert (model.min_local_batch_size, model.max_local_batch_size) == (8, 16)
    with pytest.raises(ValueError, match="no profile"):
        app.job_model(("aws",))


def test_read_app_profiles_reports_bad_rows(tmp_path: Path) -> None:
    _write(tmp_path / "placements-aws.csv", "placement,local_bsz,step_time,sync_time\n1,x,1,0")
    _write(tmp_path / "validation-8.csv", "progress,iteration,metric,grad_sqr,grad_var\n1,1,1,1,1")
    with pytest.raises(ValueError, match=r"placements-aws.csv:2: column 'local_bsz'"):
        read_app_profiles(tmp_path)


def _synthetic_times(theta: PerfParams) -> tuple[np.ndarray, ...]:
    nodes, replicas, bsz = [], [], []
    for n, k in [(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (2, 16), (4, 16), (4, 32)]:
        for m in (8, 16, 32, 64):
            nodes.append(n)
            replicas.append(k)
            bsz.append(m)
    n_arr, k_arr, m_arr = (np.asarray(v, np.float64) for v in (nodes, replicas, bsz))
    t_c = compute_time(theta, m_arr)
    t_o = optimizer_time(theta, t_c, network_time(theta, n_arr, k_arr))
    return n_arr, k_arr, m_arr, t_c, t_o


def test_fit_recovers_a_known_model() -> None:
    """A5.1 model test: fitting recovers known theta from exact synthetic times (up to the
    small bias of the regularizers): every predicted step time within 2%."""
    theta = PerfParams(0.05, 0.004, 0.3, 0.02, 0.08, 0.01, 1.7)
    n, k, m, t_c, t_o = _synthetic_times(theta)
    fitted = fit_perf_params(n, k, m, t_c, t_o)
    assert math.isclose(fitted.alpha_c, theta.alpha_c, rel_tol=0.02)
    assert math.isclose(fitted.beta_c, theta.beta_c, rel_tol=0.02)
    np.testing.assert_allclose(compute_time(fitted, m), t_c, rtol=0.02)
    pred = throughput(fitted, n, k, m, 0)
    np.testing.assert_allclose(pred, k * m / t_o, rtol=0.02)
    assert 1.0 <= fitted.gamma <= 10.0


def test_fit_freezes_unobserved_parameters() -> None:
    """adaptdl's rules: one batch size pins alpha_c to half the mean accumulation time; no
    multi-node rows leave alpha_n, beta_n at >= 1.1 x alpha_r, beta_r; single-replica data
    leaves the single-node network terms at their lower bound."""
    theta = PerfParams(0.05, 0.004, 0.3, 0.02, 0.08, 0.01, 1.7)
    n, k, m, t_c, t_o = _synthetic_times(theta)
    one = m == 16
    pinned = fit_perf_params(n[one], k[one], m[one], t_c[one], t_o[one])
    assert math.isclose(pinned.alpha_c, float(t_c[one].mean()) / 2)
    local = n == 1
    single_node = fit_perf_params(n[local], k[local], m[local], t_c[local], t_o[local])
    assert single_node.alpha_n >= 1.1 * single_node.alpha_r - 1e-15
    assert single_node.beta_n >= 1.1 * single_node.beta_r - 1e-15
    assert single_node.alpha_r > 1e-6  # observed (1 node, 2-8 replicas)
    solo = k == 1
    alone = fit_perf_params(n[solo], k[solo], m[solo], t_c[solo], t_o[solo])
    assert alone.alpha_r == alone.beta_r == 1e-8
    with pytest.raises(ValueError, match="non-empty"):
        fit_perf_params(n[:0], k[:0], m[:0], t_c[:0], t_o[:0])


def test_seed_throughput_at_the_largest_local_batch() -> None:
    types = ["t4", "t4", "dgx"]
    bsz = np.asarray([32.0, 64.0, 128.0])
    step = np.asarray([0.5, 0.8, 0.4])
    assert seed_throughput(types, bsz, step, "t4") == 64 / 0.8
    assert seed_throughput(types, bsz, step, "dgx") == 128 / 0.4
    assert seed_throughput(types, bsz, step, "rtx") == 0.0


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="shared/reference not present")
def test_real_profiles_fit_and_give_models() -> None:
    root = REFERENCE / "traces" / "sia_profiles"
    types = ("aws", "dgx-ext", "rtx")
    library = read_profile_library(root, apps=["cifar10", "imagenet", "gpt_pmp"], types=types)
    assert sorted(library) == ["cifar10", "imagenet"]  # gpt_pmp has no aws profile
    for app in library.values():
        assert app.dropped_rows == 0
        for t in types:
            theta = app.perf_params(t)
            obs = app.times[t]
            pred = throughput(theta, obs.nodes, obs.replicas, obs.local_bsz, 0)
            rate = obs.replicas * obs.local_bsz / obs.optim_time
            err = np.sqrt(np.mean(np.log(pred / rate) ** 2))
            assert err < 0.15  # RMS log error of the fitted throughput
        model = app.job_model(types)
        assert np.isfinite(model.perf_params).all()
        assert model.grad_sqr > 0 and model.grad_var >= 0
    assert library["cifar10"].init_batch_size == 128
