from datetime import datetime, timedelta, timezone

from pipeline_project.ingest import BatchManifest, RawObject, SensorCursor, make_batch_id, plan_batch

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def obj(key: str, seconds: float, etag: str = "e") -> dict:
    return {"Key": key, "ETag": f'"{etag}"', "Size": 10, "LastModified": T0 + timedelta(seconds=seconds)}


def test_first_tick_takes_everything_oldest_first():
    taken, cursor = plan_batch([obj("raw/b", 2), obj("raw/a", 1)], SensorCursor(), max_objects=10)
    assert [o.key for o in taken] == ["raw/a", "raw/b"]
    assert cursor.since == (T0 + timedelta(seconds=2)).isoformat()
    assert set(cursor.edge_keys) == {"raw/a", "raw/b"}


def test_same_second_arrival_is_not_lost_and_seen_keys_are_not_repeated():
    _, cursor = plan_batch([obj("raw/a", 1)], SensorCursor(), max_objects=10)
    # a new object lands in the same second as the cursor edge; the listing starts before the edge
    taken, cursor2 = plan_batch([obj("raw/a", 1), obj("raw/late", 1)], cursor, max_objects=10)
    assert [o.key for o in taken] == ["raw/late"]
    again, cursor3 = plan_batch([obj("raw/a", 1), obj("raw/late", 1)], cursor2, max_objects=10)
    assert again == [] and cursor3 == cursor2


def test_max_objects_caps_a_batch_and_cursor_resumes_after_it():
    listing = [obj(f"raw/{i:02d}", i * 10) for i in range(5)]
    taken, cursor = plan_batch(listing, SensorCursor(), max_objects=2)
    assert [o.key for o in taken] == ["raw/00", "raw/01"]
    rest, _ = plan_batch([o for o in listing if o["LastModified"] > T0 + timedelta(seconds=8)], cursor, max_objects=10)
    assert [o.key for o in rest] == ["raw/02", "raw/03", "raw/04"]


def test_cursor_round_trips_through_json():
    c = SensorCursor(since=T0.isoformat(), edge_keys=("raw/a",))
    assert SensorCursor.from_json(c.to_json()) == c
    assert SensorCursor.from_json(None) == SensorCursor()


def test_batch_id_is_deterministic_in_the_objects_and_changes_with_etags():
    a = [RawObject.from_listing(obj("raw/a", 1)), RawObject.from_listing(obj("raw/b", 2))]
    assert make_batch_id(a) == make_batch_id(list(reversed(a)))
    b = [RawObject.from_listing(obj("raw/a", 1, etag="other")), a[1]]
    assert make_batch_id(a) != make_batch_id(b)


def test_manifest_round_trip():
    m = BatchManifest(batch_id="b1", bucket="pipeline", objects=(RawObject.from_listing(obj("raw/a", 1)),))
    assert BatchManifest.from_json(m.to_json()) == m
    assert m.total_bytes == 10
