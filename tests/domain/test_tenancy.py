import pytest

from gpupool.domain import Membership, Quota, Role, Tenant, TenantTree, ValidationError


def test_tree_creates_missing_ancestors_and_knows_leaves():
    tree = TenantTree([Tenant("physics/lab-a"), Tenant("physics/lab-b"), Tenant("bio")])
    assert "physics" in tree
    assert tree.children("physics") == ("physics/lab-a", "physics/lab-b")
    assert tree.leaves() == ["bio", "physics/lab-a", "physics/lab-b"]
    assert tree.ancestors("physics/lab-a") == ["physics/lab-a", "physics"]
    assert tree.in_subtree("physics/lab-a", "physics")
    assert not tree.in_subtree("physics-x", "physics")


def test_unknown_tenant_error_lists_known_ones():
    tree = TenantTree([Tenant("lab-a")])
    with pytest.raises(ValidationError, match="unknown tenant 'lab-z'.*lab-a"):
        tree.get("lab-z")


def test_quota_limit_below_guarantee_is_rejected():
    with pytest.raises(ValidationError, match="below guaranteed"):
        Quota.gpus(guaranteed=8, limit=4)


def test_children_guarantees_must_fit_parent_limit():
    with pytest.raises(ValidationError, match="add up to 10"):
        TenantTree(
            [
                Tenant("p", Quota.gpus(guaranteed=4, limit=8)),
                Tenant("p/a", Quota.gpus(guaranteed=5)),
                Tenant("p/b", Quota.gpus(guaranteed=5)),
            ]
        )


@pytest.mark.parametrize("name", ["", "a//b", "/a", "a b", "a/"])
def test_bad_tenant_names(name):
    with pytest.raises(ValidationError):
        Tenant(name)


def test_admin_is_not_a_tenant_role():
    with pytest.raises(ValidationError, match="global role"):
        Membership("alice", "lab-a", Role.ADMIN)


def test_fractional_gpu_quota_in_milli():
    q = Quota.gpus(guaranteed=1.5, limit=2.25)
    assert (q.guaranteed_milli, q.limit_milli) == (1500, 2250)
