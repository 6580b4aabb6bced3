import itertools

import pytest
from permutation import Permutation, compose


def test_rejects_non_permutations():
    with pytest.raises(ValueError):
        Permutation([0, 0, 1])
    with pytest.raises(ValueError):
        Permutation([1, 2, 3])


def test_from_cycles_and_cycles_round_trip():
    p = Permutation.from_cycles(6, [(0, 3, 5), (1, 4)])
    assert list(p) == [3, 4, 2, 5, 1, 0]
    assert p.cycles() == [(0, 3, 5), (1, 4)]
    assert p.cycles(include_fixed=True) == [(0, 3, 5), (1, 4), (2,)]


def test_from_cycles_rejects_overlapping_cycles():
    with pytest.raises(ValueError):
        Permutation.from_cycles(4, [(0, 1), (1, 2)])


def test_order_and_sign():
    p = Permutation.from_cycles(7, [(0, 1, 2), (3, 4), (5, 6)])
    assert p.cycle_type() == (3, 2, 2)
    assert p.order() == 6
    assert p.sign() == 1
    assert Permutation.from_cycles(3, [(0, 1)]).sign() == -1


def test_inverse_undoes_the_permutation():
    p = Permutation([4, 0, 3, 1, 2])
    identity = Permutation.identity(5)
    assert p * p.inverse() == identity
    assert p.inverse() * p == identity
    assert all(p.inverse()(p(i)) == i for i in range(5))


def test_powers():
    p = Permutation.from_cycles(5, [(0, 1, 2, 3, 4)])
    assert p**5 == Permutation.identity(5)
    assert p**2 == Permutation([2, 3, 4, 0, 1])
    assert p**-1 == p.inverse()


def test_disjoint_cycles_commute():
    a = Permutation.from_cycles(5, [(0, 1)])
    b = Permutation.from_cycles(5, [(2, 3, 4)])
    assert a * b == b * a == Permutation.from_cycles(5, [(0, 1), (2, 3, 4)])


def test_degree_mismatch():
    with pytest.raises(ValueError):
        Permutation.identity(3) * Permutation.identity(4)


def test_product_applies_right_factor_first():
    p = Permutation.from_cycles(3, [(0, 1)])
    q = Permutation.from_cycles(3, [(1, 2)])
    # q sends 0->0, p sends 0->1; q sends 1->2, p fixes 2; q sends 2->1, p sends 1->0
    assert p * q == Permutation([1, 2, 0])
    assert q * p == Permutation([2, 0, 1])


def test_product_matches_function_composition():
    perms = [Permutation(images) for images in itertools.permutations(range(4))]
    for p in perms[::5]:
        for q in perms[::7]:
            pq = p * q
            assert [pq(i) for i in range(4)] == [p(q(i)) for i in range(4)], (p, q)


def test_compose_applies_rightmost_first():
    p = Permutation([1, 2, 3, 0])
    q = Permutation([0, 2, 1, 3])
    r = Permutation([3, 1, 2, 0])
    c = compose(p, q, r)
    assert [c(i) for i in range(4)] == [p(q(r(i))) for i in range(4)]
    assert compose(p) == p
    with pytest.raises(ValueError):
        compose()


def test_conjugate_relabels_cycles():
    p = Permutation.from_cycles(5, [(0, 1, 2)])
    by = Permutation([3, 4, 0, 1, 2])
    # relabelling every point i as by(i) turns the cycle (0 1 2) into (3 4 0)
    assert p.conjugate(by).cycles() == [(0, 3, 4)]
    assert p.conjugate(by).cycle_type() == p.cycle_type()


def test_sign_is_multiplicative():
    for p_images, q_images in [([1, 0, 2, 3], [0, 2, 3, 1]), ([3, 2, 1, 0], [1, 2, 3, 0])]:
        p, q = Permutation(p_images), Permutation(q_images)
        assert (p * q).sign() == p.sign() * q.sign()
