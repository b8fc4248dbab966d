"""The trainer's mixture: in TrainConfig / JobConfig, handed to the loader, and reported to MLflow."""

from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.topic import TopicSpec
from pipeline_project.training.config import TrainConfig
from pipeline_project.training.job import JobConfig
from pipeline_project.training.tracking.mixture import MixtureReport, final_mixture_metrics

PROPORTIONS = {"en_web": 0.5, "zh_web": 0.3, "code": 0.15, "books": 0.05}


def test_no_mixture_by_default_and_the_job_file_round_trips_one():
    assert TrainConfig().mixture is None
    job = JobConfig(
        kafka=KafkaSettings(bootstrap_servers="k:1"),
        topic=TopicSpec(name="t"),
        train={"mixture": {"proportions": PROPORTIONS, "on_domain_exhausted": "renormalize"}},
    )
    back = JobConfig.model_validate_json(job.model_dump_json())
    assert back.train.mixture.proportions == dict(sorted(PROPORTIONS.items()))
    assert back.train.mixture.on_domain_exhausted == "renormalize"
    assert JobConfig(kafka=KafkaSettings(bootstrap_servers="k:1"), topic=TopicSpec(name="t"), train={"mixture": {
        "proportions": {"a": 1}}}).train.mixture.on_domain_exhausted == "wait"  # fmt: skip


def _state(delivered):
    return {"partitions": {}, "mixture": {"rank": {"delivered": delivered}}}


def test_final_shares_count_what_every_rank_delivered_in_this_invocation():
    starts = [_state({"a": 10, "b": 0}), _state({"a": 0, "b": 5})]
    ends = [_state({"a": 40, "b": 20}), _state({"a": 30, "b": 25})]
    got = final_mixture_metrics(starts, ends)
    assert got == {"mixture/share/a": 60 / 100, "mixture/share/b": 40 / 100, "mixture/blocks": 100.0}
    assert final_mixture_metrics([{"partitions": {}}], [{"partitions": {}}]) == {}


class _Loader:
    def __init__(self):
        self.events = []

    def mixture_figures(self):
        return {"realized": {"a": 0.7, "b": 0.3}, "target": {"a": 0.7, "b": 0.3}, "events": list(self.events)}


def test_step_metrics_log_each_dry_event_once_with_a_tag():
    loader = _Loader()
    report = MixtureReport.of(loader)
    assert MixtureReport.of(object()) is None  # the plain loader: nothing to report
    assert report.step_metrics() == {
        "mixture/realized/a": 0.7,
        "mixture/realized/b": 0.3,
        "mixture/target/a": 0.7,
        "mixture/target/b": 0.3,
    }
    loader.events.append({"domain": "b", "policy": "wait", "draws": 123})
    assert report.step_metrics()["mixture/exhausted/b"] == 123.0
    assert report.take_tags() == {"mixture.exhausted.b": "wait"} and report.take_tags() == {}
    assert "mixture/exhausted/b" not in report.step_metrics()
