"""`bigfleet machine history`'s table (issue 34: every transition's grace, reason, batch size
and summary, in a table that fits a terminal)."""

from bigfleet.models.actions import DrainReason
from workers.verbs.machine import history_table


def row(**given):
    base = dict(
        start_time="2026-12-06T16:00:00.123Z", close_time="2026-12-06T16:00:31Z",
        transition="drain", state="IDLE", cluster="training", grace_seconds=30.0, force=False,
        escalated_grace_seconds=None, reason=DrainReason.PREEMPT.value, machines=8,
        summary="drain 8 machines of training", workflow_id="batch-drain-training-m-x8-1-2",
    )
    return {**base, **given}


def test_each_transition_shows_its_grace_reason_batch_and_summary_in_aligned_columns():
    rows = [
        row(escalated_grace_seconds=0.0),
        row(transition="configure", state="CONFIGURED", grace_seconds=None, reason=None,
            machines=1, summary="", close_time=None, workflow_id="machine-m-configure-1-3"),
    ]
    lines = history_table(rows).splitlines()
    header, drain, summary, workflow, configure = lines[:5]
    grace_at = header.index("GRACE")
    assert drain[grace_at:].startswith("30 s → 0 s")
    assert configure[grace_at:].startswith("-")
    assert drain[header.index("REASON"):].startswith("preempt ")
    assert drain.rstrip().endswith("8") and configure.rstrip().endswith("1")
    assert summary.strip() == "drain 8 machines of training"
    assert workflow.strip() == "workflow batch-drain-training-m-x8-1-2"
    assert len(lines) == 6  # the configure row has no summary line
    assert max(len(line) for line in lines) <= 100


def test_the_rows_drain_reason_is_one_the_engine_gives():
    """Issue 44: the table was shown a reason ("preempted") no drain ever carries."""
    assert row()["reason"] in {r.value for r in DrainReason}


def test_columns_widen_for_a_long_cluster_name_and_stay_aligned():
    lines = history_table([row(cluster="a-very-long-cluster-name-indeed"), row()]).splitlines()
    header, first, second = lines[0], lines[1], lines[4]
    at = header.index("GRACE")
    assert first[at:].startswith("30 s") and second[at:].startswith("30 s")
