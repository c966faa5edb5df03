"""The quota tree: borrowing and lending limits, hierarchical cohorts, usage bubbling."""

from __future__ import annotations

from admission_builders import cq, make_gov, quota_group

from gpuaas.engine.admission.quota import QuotaTree
from gpuaas.model.governance import Cohort

FR = ("default", "cpu")


def test_standalone_queue_has_only_its_nominal_quota() -> None:
    tree = QuotaTree(make_gov([cq("a", 6000)]))
    node = tree.cqs["a"]
    assert tree.available(node, FR) == 6000
    tree.add_usage(node, {FR: 4000})
    assert tree.available(node, FR) == 2000
    assert tree.potential_available(node, FR) == 6000
    assert tree.borrow_height(node, FR, 1000) == (0, False)


def test_borrowing_limit_caps_what_a_queue_takes_from_the_cohort() -> None:
    gov = make_gov([cq("a", 1000, "c", borrowing=2000), cq("b", 10_000, "c")])
    tree = QuotaTree(gov)
    a, b = tree.cqs["a"], tree.cqs["b"]
    assert tree.available(a, FR) == 3000
    assert tree.potential_available(a, FR) == 3000
    assert tree.available(b, FR) == 11_000
    tree.add_usage(a, {FR: 3000})
    assert tree.available(a, FR) == 0
    assert tree.available(b, FR) == 8000
    assert tree.borrowing_with(a, FR, 0)
    assert tree.is_borrowing(a, [FR])
    tree.remove_usage(a, {FR: 3000})
    assert tree.cohorts["c"].usage[FR] == 0


def test_lending_limit_keeps_guaranteed_quota_out_of_the_cohort() -> None:
    # Kueue's "reclaim quota from lender": lend1 lends 4 of 6, lend2 lends 2 of 6 -> pool of 6.
    gov = make_gov([cq("l1", 6, "c", lending=4), cq("l2", 6, "c", lending=2)])
    tree = QuotaTree(gov)
    cohort = tree.cohorts["c"]
    assert cohort.subtree[FR] == 6
    l1, l2 = tree.cqs["l1"], tree.cqs["l2"]
    assert tree.available(l1, FR) == 2 + 6
    tree.add_usage(l1, {FR: 3})  # 2 from guaranteed, 1 from the cohort
    assert cohort.usage[FR] == 1
    tree.add_usage(l2, {FR: 7})  # 4 guaranteed, 3 from the cohort
    assert cohort.usage[FR] == 4
    assert tree.available(l1, FR) == 0 + 2
    tree.remove_usage(l2, {FR: 3})
    assert cohort.usage[FR] == 1
    assert tree.available(l1, FR) == 5


def test_hierarchical_height_orders_borrowing_distance() -> None:
    root = Cohort("root")
    guaranteed = Cohort(
        "g", parent="root", resource_groups=(quota_group("cpu", [("default", 4, None, None)]),)
    )
    gov = make_gov([cq("gq", 0, "g"), cq("be", 0, "root")], [root, guaranteed])
    tree = QuotaTree(gov)
    assert tree.cohorts["g"].height == 1 and tree.cohorts["root"].height == 2
    assert tree.borrow_height(tree.cqs["gq"], FR, 4) == (1, True)
    assert tree.borrow_height(tree.cqs["be"], FR, 4) == (2, False)
    assert tree.available(tree.cqs["be"], FR) == 4


def test_share_is_weighted_dominant_borrowing() -> None:
    from fractions import Fraction

    gov = make_gov([cq("a", 4, "c", fair_sharing_weight=Fraction(2)), cq("b", 4, "c")])
    tree = QuotaTree(gov)
    a, b = tree.cqs["a"], tree.cqs["b"]
    assert tree.share(a) == 0.0
    tree.add_usage(a, {FR: 6})
    tree.add_usage(b, {FR: 6})
    # each borrows 2 of the cohort's 8 lendable: 250 per mille; a's weight halves it
    assert tree.share(b) == 250.0
    assert tree.share(a) == 125.0
    assert tree.share(b, minus={FR: 2}) == 0.0
    assert tree.share(b, plus={FR: 2}) == 500.0
