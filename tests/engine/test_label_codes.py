"""`ProfileTable.label_codes`: a label as small integers, extended as profiles are interned, in
step with `labels` (the per-domain tallies of `Same` needs sum over it)."""

from bigfleet.models import CapacityType, Resources
from bigfleet.profiles import Profile, ProfileTable


def profile(name: str, rack: str | None) -> Profile:
    return Profile(
        provider="metal",
        instance_type=name,
        zone="z1",
        capacity_type=CapacityType.BARE_METAL,
        price_per_hour=1.0,
        interruption_probability=0.0,
        resources=Resources(cpu=8),
        labels=(("rack", rack),) if rack else (),
    )


def test_codes_follow_the_labels_as_profiles_are_interned() -> None:
    table = ProfileTable()
    for name, rack in (("a", "r2"), ("b", None), ("c", "r1")):
        table.intern(profile(name, rack))
    codes, values = table.label_codes("rack")
    assert codes.tolist() == [0, -1, 1] and values == ["r2", "r1"]

    for name, rack in (("d", "r1"), ("e", "r3"), ("f", None)):
        table.intern(profile(name, rack))
    codes, values = table.label_codes("rack")
    assert values == ["r2", "r1", "r3"]
    assert [values[c] if c >= 0 else None for c in codes.tolist()] == table.labels("rack")
    absent, none = table.label_codes("gpu-model")  # (a key no profile carries)
    assert absent.tolist() == [-1] * 6 and none == []
