"""How a machine carries calibration factors (perfmodel/model/calibration.py), by hand."""

import math
from dataclasses import replace

import pytest
from test_physics_step import hand_machine

from perfmodel.model.calibration import Factors, calibrated, scaled_tau
from perfmodel.model.machine import CollectiveLaw
from perfmodel.specs import registry

LAW = CollectiveLaw(latency_us=20.0, busbw_GBps=300.0, rel_unc_lat=0.1, rel_unc_bw=0.2, rule="r")


def _nvlink_machine():
    h200 = registry.load_gpu("h200")
    m = hand_machine()
    return replace(m, link=registry.load_link(h200.default_interconnect), all_reduce=LAW, all_to_all=LAW)


def test_collective_factors_on_their_own_family():
    """NVLink factors: latency x 2 with a 10% posterior sigma, bandwidth untouched (factor 1);
    the uncertainties combine in quadrature: hypot(0.1, 0.1) on latency, the law's own on bw."""
    m = calibrated(_nvlink_machine(), Factors(values={"coll_lat.nvlink": 2.0}, sigma={"coll_lat.nvlink": 0.1}))
    ar = m.all_reduce
    assert (ar.latency_us, ar.busbw_GBps) == (40.0, 300.0)
    assert ar.rel_unc_lat == pytest.approx(math.hypot(0.1, 0.1)) and ar.rel_unc_bw == 0.2
    bw = calibrated(_nvlink_machine(), Factors(values={"coll_bw.nvlink": 0.5}, sigma={"coll_bw.nvlink": 0.3}))
    assert (bw.all_reduce.latency_us, bw.all_reduce.busbw_GBps) == (20.0, 150.0)
    assert bw.all_reduce.rel_unc_bw == pytest.approx(math.hypot(0.3, 0.2)) and bw.all_reduce.rel_unc_lat == 0.1


def test_other_family_widens_by_the_largest_move():
    """PCIe factors x 2 (latency) and x 0.8 (bandwidth) on an NVLink machine: no factor applies,
    and both uncertainties widen by the larger move, |ln 2| = 0.693 (not |ln 0.8| = 0.223)."""
    m = calibrated(_nvlink_machine(), Factors(values={"coll_lat.pcie": 2.0, "coll_bw.pcie": 0.8}))
    ar = m.all_reduce
    assert (ar.latency_us, ar.busbw_GBps) == (20.0, 300.0)
    assert ar.rel_unc_lat == pytest.approx(math.hypot(0.1, math.log(2)))
    assert ar.rel_unc_bw == pytest.approx(math.hypot(0.2, math.log(2)))
    assert "widened by 69%" in ar.rule
    # no collective factor at all: the law is the same object
    assert calibrated(_nvlink_machine(), Factors(values={"launch": 2.0})).all_reduce == LAW


def test_scaled_tau_capped_at_what_the_tree_accepts():
    f = Factors(values={"tau": 1.5})
    assert scaled_tau(4.0, f, 17) == 6.0
    assert scaled_tau(4.0, f, 5) == 5.0  # B + 1 = 5 tokens at most
    assert scaled_tau(4.0, Factors(), 17) == 4.0
