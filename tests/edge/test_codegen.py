"""bigfleet/v1 is what proto/ makes: regenerating the wire code changes nothing."""

from bigfleet.edge import codegen


def test_regenerating_the_wire_code_changes_nothing():
    assert codegen.stale() == []
