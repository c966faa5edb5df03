"""The diurnal generator: a day/night load at the asked peak-to-trough and level."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpuaas.model.errors import InvalidValue
from gpuaas.sim.diurnal import (
    DiurnalSpec,
    amplitude,
    diurnal_jobs,
    itp_sizes,
    load_profile,
    peak_to_trough,
    smoothing,
)

ITP = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "itp" / "cluster04.csv"


def test_same_seed_same_jobs_and_another_seed_others() -> None:
    spec = DiurnalSpec(gpus=64, days=1, seed=3)
    a, b = diurnal_jobs(spec), diurnal_jobs(spec)
    assert [(j.name, j.submit, j.duration, j.milli_gpu) for j in a] == [
        (j.name, j.submit, j.duration, j.milli_gpu) for j in b
    ]
    c = diurnal_jobs(DiurnalSpec(gpus=64, days=1, seed=4))
    assert [j.submit for j in a] != [j.submit for j in c]
    assert [j.submit for j in a] == sorted(j.submit for j in a)
    assert {j.tenant for j in a} == {"t0", "t1", "t2", "t3"}


def test_the_load_swings_by_the_ratio_asked_and_peaks_at_the_level_asked() -> None:
    spec = DiurnalSpec(gpus=512, days=5, peak_to_trough=10, peak_load=0.6, max_job_gpus=16)
    jobs = diurnal_jobs(spec)
    assert 7.0 <= peak_to_trough(jobs, spec.days) <= 14.0
    prof = load_profile(jobs)[24 : 5 * 24].reshape(-1, 24).mean(axis=0)
    assert prof.max() == pytest.approx(0.6 * 512, rel=0.2)
    assert int(np.argmax(prof)) in range(11, 18)  # around the peak hour, 14:00
    assert all(j.milli_gpu <= 16_000 for j in jobs)


def test_a_flat_day_and_the_smoothing_of_long_jobs() -> None:
    flat = DiurnalSpec(gpus=256, days=3, peak_to_trough=1, max_job_gpus=8)
    assert amplitude(flat) == 0
    assert peak_to_trough(diurnal_jobs(flat), 3) < 2.0
    short = DiurnalSpec(gpus=256, duration_median=600)
    long = DiurnalSpec(gpus=256, duration_median=6 * 3600, duration_max=24 * 3600)
    assert smoothing(long) < smoothing(short) <= 1
    # a run-time law that smooths a 10:1 swing away cannot be driven past a = 1
    assert amplitude(long) == 1.0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"gpus": 0}, "gpus"),
        ({"peak_to_trough": 0.5}, "peak_to_trough"),
        ({"days": 0}, "days"),
        ({"tenants": 0}, "tenants"),
        ({"max_job_gpus": 1, "sizes": ((8, 1.0),)}, "sizes"),
        ({"duration_median": 0}, "duration"),
    ],
)
def test_bad_specs_name_the_field(change: dict[str, object], field: str) -> None:
    spec = DiurnalSpec(**{"gpus": 64, **change})  # type: ignore[arg-type]
    with pytest.raises(InvalidValue) as err:
        diurnal_jobs(spec)
    assert field in str(err.value)


def test_sizes_from_the_itp_trace() -> None:
    if not ITP.exists():
        pytest.skip(f"{ITP} is absent: the ITP traces live in ../shared/data/itp")
    sizes = dict(itp_sizes(ITP))
    assert sum(sizes.values()) == pytest.approx(1.0)
    assert sizes[1] > 0.5 and 64 in sizes
    jobs = diurnal_jobs(DiurnalSpec(gpus=128, days=1, sizes=tuple(sizes.items()), max_job_gpus=32))
    assert {j.milli_gpu // 1000 for j in jobs} <= {g for g in sizes if g <= 32}
