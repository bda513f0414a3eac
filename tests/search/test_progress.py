"""The pieces of a progress report: the rate over recent jobs and the state of the stages."""

from actors.search.index.store import Progress
from actors.search.ingest.progress import (
    PROGRESS_INTERVAL,
    RATE_WINDOW,
    Pipeline,
    Rate,
    Reporter,
    progress_event,
)


def test_the_rate_counts_the_jobs_of_the_last_seconds() -> None:
    rate = Rate()
    assert rate.per_second(100.0) == 0.0
    rate.add(ended=10.0, seconds=2.0, count=400)  # 8-10 s
    rate.add(ended=12.0, seconds=1.0, count=100)  # 11-12 s
    assert rate.per_second(12.0) == 500 / 4.0  # from the first start to the last end
    assert rate.per_second(10.0 + RATE_WINDOW + 0.5) == 100 / 1.0  # the first one aged out
    assert rate.per_second(100.0) == 0.0


def test_the_state_says_which_stage_has_work() -> None:
    pipeline = Pipeline()
    assert pipeline.state == "idle"
    pipeline.embedding = True
    assert pipeline.state == "embedding"
    pipeline.queued = 3  # files waiting come first: the keyword stage is not done
    assert pipeline.state == "indexing"
    pipeline.queued, pipeline.indexing = 0, True
    assert pipeline.state == "indexing"


def test_the_event_carries_the_counts_and_rounded_rates() -> None:
    pipeline = Pipeline(queued=2, indexing=True, keyword_rate=1234.5678, embedding_rate=0.04)
    event = progress_event("notes", Progress(5, 40, 30, 8, 2), pipeline)
    assert (event.db, event.state, event.queued) == ("notes", "indexing", 2)
    assert (event.documents, event.chunks, event.embedded, event.pending, event.failed) == (
        5,
        40,
        30,
        8,
        2,
    )
    assert (event.keyword_rate, event.embedding_rate) == (1234.6, 0.0)


def test_the_move_to_idle_is_reported_even_with_no_new_counts() -> None:
    """The embedding stage's last job finds nothing and brings no counts: a report sent just
    before it said "embedding", so the idle one must follow at once."""
    reporter, pipeline = Reporter(), Pipeline(embedding=True)
    assert reporter.due("notes", pipeline, now=0.0) is None  # nothing known yet
    reporter.counts = Progress(2, 2, 2, 0, 0)
    busy = reporter.due("notes", pipeline, now=10.0)
    assert busy is not None and busy.state == "embedding"
    pipeline.embedding = False  # the last job: nothing left, no new counts
    idle = reporter.due("notes", pipeline, now=10.1)
    assert idle is not None and (idle.state, idle.embedded) == ("idle", 2)
    assert reporter.due("notes", pipeline, now=10.2) is None  # never the same event twice


def test_while_busy_at_most_one_report_per_interval() -> None:
    reporter, pipeline = Reporter(), Pipeline(indexing=True)
    reporter.counts = Progress(1, 10, 0, 10, 0)
    assert reporter.due("notes", pipeline, now=0.0) is not None
    reporter.counts = Progress(2, 20, 0, 20, 0)
    assert reporter.due("notes", pipeline, now=PROGRESS_INTERVAL / 2) is None
    later = reporter.due("notes", pipeline, now=PROGRESS_INTERVAL)
    assert later is not None and later.chunks == 20
