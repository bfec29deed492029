import pytest

from gpupool.domain import (
    TERMINAL_STATES,
    TRANSITIONS,
    IllegalTransition,
    Request,
    ValidationError,
    Workload,
    WorkloadState,
    transition,
)

S = WorkloadState


def test_every_state_has_a_row_in_the_table():
    assert set(TRANSITIONS) == set(WorkloadState)


def test_terminal_states_allow_no_transition():
    for s in TERMINAL_STATES:
        assert TRANSITIONS[s] == frozenset()


def test_happy_path_sets_timestamps_and_records_events():
    w = Workload("w1", "lab-a", "alice", Request(gpus=1), submitted_at=0)
    w, e1 = transition(w, S.ADMITTED, 10, "fits on a-0")
    w, e2 = transition(w, S.STARTING, 11, "starting")
    w, e3 = transition(w, S.RUNNING, 12, "running")
    w, e4 = transition(w, S.SUCCEEDED, 20, "exited 0", exit_code=0)
    assert (w.admitted_at, w.started_at, w.finished_at, w.exit_code) == (10, 12, 20, 0)
    assert [e.kind for e in (e1, e2, e3, e4)] == [
        "workload.admitted",
        "workload.starting",
        "workload.running",
        "workload.succeeded",
    ]
    assert e1.message == "fits on a-0" and e1.data["from"] == "pending"


@pytest.mark.parametrize(
    "frm,to",
    [
        (S.PENDING, S.RUNNING),
        (S.SUCCEEDED, S.PENDING),
        (S.CANCELLED, S.RUNNING),
        (S.PENDING, S.CULLED),
    ],
)
def test_illegal_transitions_raise(frm, to):
    w = Workload("w1", "t", "u", state=frm)
    with pytest.raises(IllegalTransition, match=f"from {frm} to {to}"):
        transition(w, to, 0, "x")


def test_preempted_work_can_requeue_and_counts_preemptions():
    w = Workload("w1", "t", "u", Request(gpus=1), state=S.RUNNING, started_at=5)
    w, _ = transition(w, S.PREEMPTED, 100, "reclaimed by lab-b")
    assert w.preemptions == 1 and w.finished_at == 100
    w, _ = transition(w, S.PENDING, 100, "requeued")
    assert w.state is S.PENDING and w.started_at is None and w.finished_at is None


def test_request_rejects_whole_and_fraction_together():
    with pytest.raises(ValidationError) as e:
        Request(gpus=1, gpu_milli=500)
    assert e.value.field == "gpu_fraction"


def test_request_rejects_fraction_of_one_or_more():
    with pytest.raises(ValidationError, match="below 1"):
        Request(gpu_milli=1000)


def test_request_totals():
    assert Request(gpus=3).total_gpu_milli == 3000
    assert Request(gpu_milli=250).total_gpu_milli == 250
    assert not Request().wants_gpu


def test_starting_work_the_engine_gave_up_on_goes_back_to_pending():
    """A pod still Pending long after its start (ExecState.REJECTED) is requeued."""
    w = Workload("w1", "lab", "ann", state=WorkloadState.STARTING, admitted_at=5.0)
    back, event = transition(w, WorkloadState.PENDING, 40.0, "the pod stayed Pending")
    assert back.state is WorkloadState.PENDING and back.admitted_at is None
    assert event.kind == "workload.pending"
