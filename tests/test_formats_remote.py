"""Object storage through fsspec against moto's real S3 server (a separate process on
127.0.0.1), with a TCP proxy that cuts a connection or answers 503 once."""

from __future__ import annotations

import json
import os

import pytest
from servers import DUMMY_CREDENTIALS

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.io.lhotse_io import install_lhotse_io_backend
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.remote import (
    RangeGetReader,
    RetryingReader,
    is_remote,
    open_remote,
    remote_glob,
    remote_output,
)

MB = 1 << 20


def test_is_remote():
    assert is_remote("s3://b/k.tar") and is_remote("gs://b/k") and is_remote("az://c/k")
    assert not any(is_remote(n) for n in ("/a/b.tar", "b.tar", "file:///a", "http://h/a",
                                          "https://h/a", "pipe:cat a.tar"))


def test_write_read_list(s3):
    data = os.urandom(3 * MB + 17)
    with remote_output(s3.url("d/a.bin")) as f:
        f.write(data)
    with remote_output(s3.url("d/b.txt"), "w") as f:
        f.write("héllo\n")
    with open_remote(s3.url("d/a.bin")) as f:
        assert f.read() == data
    assert s3.fs().cat_file(f"{s3.bucket}/d/b.txt") == "héllo\n".encode()
    assert remote_glob(s3.url("d"), "*.bin") == [s3.url("d/a.bin")]


def test_failed_write_leaves_nothing(s3):
    with pytest.raises(RuntimeError):
        with remote_output(s3.url("half.bin")) as f:
            f.write(os.urandom(MB))
            raise RuntimeError("writer died")
    assert not s3.fs().exists(f"{s3.bucket}/half.bin")


def test_connection_cut_mid_object_loses_nothing(s3_proxy):
    """Cut once: s3fs re-requests the range; the bytes are the object's."""
    s3, proxy = s3_proxy
    data = os.urandom(3 * MB)
    s3.fs().pipe_file(f"{s3.bucket}/x.bin", data)
    proxy.arm(cut_after=MB)
    with open_remote(s3.url("x.bin")) as f:
        assert f.read() == data
    assert proxy.faults_done == 1


def test_retry_resumes_at_offset_reached(s3_proxy):
    """More cuts in a row than s3fs retries by itself (5): our reader reopens with
    backoff and continues with a range request from the offset it had reached."""
    s3, proxy = s3_proxy
    data = os.urandom(4 * MB)
    s3.fs().pipe_file(f"{s3.bucket}/y.bin", data)
    reader = RetryingReader(s3.url("y.bin"), retries=3, backoff=0.01, block_size=MB)
    head = reader.read(MB + 5)
    proxy.arm(cut_after=100_000, times=7)
    before = len(proxy.ranges)
    rest = b""
    while chunk := reader.read(MB):
        rest += chunk
    reader.close()
    assert head + rest == data
    assert proxy.faults_done == 7 and reader.num_retries == 1
    starts = [int(r.split("=")[1].split("-")[0]) for r in proxy.ranges[before:]]
    assert min(starts) >= MB + 5  # never re-read from the start


def test_range_gets_ask_exactly_the_bytes_read(s3_proxy):
    """RangeGetReader (the spool's span reader): each read is one ranged GET of exactly
    the bytes asked (no read-ahead past them); a cut connection loses nothing; a read
    past the object's end reads its end, then nothing (not an error retried 5 times)."""
    s3, proxy = s3_proxy
    data = os.urandom(3 * MB)
    s3.fs().pipe_file(f"{s3.bucket}/r.bin", data)
    reader = RangeGetReader(s3.url("r.bin"), start=MB)
    before = len(proxy.ranges)
    assert reader.read(MB) == data[MB:2 * MB]
    assert proxy.ranges[before:] == [f"bytes={MB}-{2 * MB - 1}"]
    proxy.arm(cut_after=100_000)
    assert reader.read(2 * MB) == data[2 * MB:]  # short: the object ends first
    assert proxy.faults_done == 1
    assert reader.read(MB) == b"" and reader.num_retries == 0
    reader.close()
    with pytest.raises(WenetDataError, match=r"/nope\.bin: no such object$"):
        RangeGetReader(s3.url("nope.bin")).read(10)


def test_5xx_is_retried(s3_proxy):
    s3, proxy = s3_proxy
    s3.fs().pipe_file(f"{s3.bucket}/z.bin", b"abc" * 1000)
    proxy.arm(status_503=True)
    with open_remote(s3.url("z.bin")) as f:
        assert f.read() == b"abc" * 1000
    assert proxy.faults_done == 1


def test_permanent_failure_is_named_after_retries(s3_proxy):
    s3, proxy = s3_proxy
    s3.fs().pipe_file(f"{s3.bucket}/w.bin", os.urandom(2 * MB))
    reader = RetryingReader(s3.url("w.bin"), retries=1, backoff=0.01)
    proxy.arm(cut_after=100_000, times=100)
    with pytest.raises(WenetDataError) as e:
        reader.read(2 * MB)
    assert str(e.value).startswith(s3.url("w.bin") + ": ") and e.value.kind == "io"
    assert "\n" not in str(e.value)


def test_stalled_connection_ends_within_the_limits(s3_proxy, monkeypatch, tmp_path):
    """A connection that goes silent mid-object: an error of kind "timeout" once the
    stall limit, or the whole-request deadline, has passed (s3fs alone would wait and
    retry for minutes); in a raw list, the error names the line and the URL."""
    from wenet_lhotse.formats import read_raw_list

    s3, proxy = s3_proxy
    url = s3.url("s.bin")
    s3.fs().pipe_file(f"{s3.bucket}/s.bin", os.urandom(MB))
    monkeypatch.setenv("WENET_LHOTSE_HTTP_STALL_S", "1")
    proxy.arm(stall_after=100_000)
    with pytest.raises(WenetDataError) as e, open_remote(url) as f:
        f.read()
    assert e.value.kind == "timeout" and e.value.source == url
    assert "no data for 1 s (WENET_LHOTSE_HTTP_STALL_S)" in e.value.message
    monkeypatch.setenv("WENET_LHOTSE_HTTP_STALL_S", "600")
    monkeypatch.setenv("WENET_LHOTSE_HTTP_DEADLINE_S", "1")
    proxy.arm(stall_after=2_000)  # during the header probe
    lst = tmp_path / "s.list"
    lst.write_text(json.dumps({"key": "a", "wav": s3.url("a.wav")}) + "\n")
    s3.fs().pipe_file(f"{s3.bucket}/a.wav", os.urandom(40_000))
    with pytest.raises(WenetDataError) as e:
        list(read_raw_list(lst))
    assert e.value.kind == "timeout"  # random bytes: without the stall, bad_audio
    assert str(e.value).startswith(f"{lst}:1: cannot read audio header of {s3.url('a.wav')}")
    assert "not finished within its 1 s deadline" in str(e.value)


def test_missing_bucket_and_object(s3):
    with pytest.raises(WenetDataError, match=r"^s3://no-such-bucket-x/a\.tar: no such bucket"):
        open_remote("s3://no-such-bucket-x/a.tar")
    with pytest.raises(WenetDataError, match=r"/nope\.tar: no such object$") as e:
        open_remote(s3.url("nope.tar"))
    assert e.value.kind == "missing_file"


def test_wrong_credentials_one_clear_line(s3_auth):
    with pytest.raises(WenetDataError) as e:
        open_remote("s3://some-bucket/a.tar")
    msg = str(e.value)
    assert msg.startswith("s3://some-bucket/a.tar: access denied")
    assert "check the credentials" in msg and "\n" not in msg
    assert DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in msg


def test_lhotse_reads_and_writes_s3(s3, corpus_cuts):
    """Lhotse's own IO (cuts manifests, Shar writer and reader) on s3:// URLs."""
    from lhotse import CutSet
    from lhotse.shar import SharWriter

    install_lhotse_io_backend()
    cuts = corpus_cuts.subset(first=4)
    cuts.to_file(s3.url("cuts.jsonl.gz"))
    back = CutSet.from_file(s3.url("cuts.jsonl.gz"))
    assert [c.to_dict() for c in back] == [c.to_dict() for c in cuts]

    with SharWriter(s3.url("shar"), fields={"recording": "flac"}, shard_size=2) as w:
        for c in cuts:
            w.write(c)
    fields = {"cuts": remote_glob(s3.url("shar"), "cuts.*.jsonl.gz"),
              "recording": remote_glob(s3.url("shar"), "recording.*.tar")}
    assert len(fields["cuts"]) == 2
    got = list(CutSet.from_shar(fields=fields))
    assert [c.id for c in got] == [c.id for c in cuts]
    for a, b in zip(got, cuts):
        assert (a.load_audio() == b.load_audio()).all()


def _upload_shards(s3, tmp_path, utts, shard_size, dur):
    from wenet_lhotse.corpus import generate_corpus

    c = generate_corpus(tmp_path, num_utterances=utts, min_duration=dur, max_duration=dur,
                        shard_size=shard_size, seed=5)
    urls = []
    for p in c.shards_list.read_text().split():
        name = p.rsplit("/", 1)[1]
        s3.fs().put_file(p, f"{s3.bucket}/{name}")
        urls.append(s3.url(name))
    return urls


def test_failures_past_retries_are_counted_in_fault_tolerant_mode(s3_proxy, monkeypatch,
                                                                   tmp_path):
    """Every response carrying tar bytes is cut, past all retries; one object is
    missing: each is one counted skip naming its URL, the others are read."""
    from wenet_lhotse.errors import SkipReport
    from wenet_lhotse.formats import read_shard_list

    monkeypatch.setenv("WENET_LHOTSE_RETRIES", "1")
    monkeypatch.setenv("WENET_LHOTSE_RETRY_BACKOFF_S", "0.01")
    s3, proxy = s3_proxy
    urls = _upload_shards(s3, tmp_path, 4, 2, 1.5)
    lst = tmp_path / "s3.list"
    lst.write_text("".join(u + "\n" for u in urls + [s3.url("gone.tar")]))
    proxy.arm(cut_after=20_000, times=1000)
    report = SkipReport()
    assert list(read_shard_list(lst, policy=ReadPolicy(strict=False, skip_report=report))) == []
    assert [(i.source, i.kind) for i in report] == [
        (urls[0], "io"), (urls[1], "io"), (s3.url("gone.tar"), "missing_file")]
    assert "Response payload is not completed" in list(report)[0].message


def test_object_gone_mid_shard_names_the_member(s3, monkeypatch, tmp_path):
    """The object is deleted while its tar is being streamed (small range requests):
    the failure is permanent at once and names the URL and the member reached."""
    import wenet_lhotse.io.remote as remote
    from wenet_lhotse.errors import SkipReport
    from wenet_lhotse.formats import read_shard_list

    monkeypatch.setattr(remote, "BLOCK_SIZE", 32 << 10)
    [url] = _upload_shards(s3, tmp_path, 3, 3, 3.0)
    lst = tmp_path / "one.list"
    lst.write_text(url + "\n")
    report = SkipReport()
    it = iter(read_shard_list(lst, policy=ReadPolicy(strict=False, skip_report=report)))
    first = next(it)
    s3.fs().rm_file(url.split("://", 1)[1])
    rest = list(it)
    assert len(rest) < 2 and first.id not in [c.id for c in rest]
    [item] = list(report)
    assert item.source == url and item.kind == "missing_file" and item.member
    assert "no such object" in item.message


def test_no_credentials_is_one_line_at_once(s3, monkeypatch, tmp_path):
    import s3fs

    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    s3fs.S3FileSystem.clear_instance_cache()
    with pytest.raises(WenetDataError, match=r"NoCredentialsError: .*AWS_ACCESS_KEY_ID") as e:
        open_remote(s3.url("x.tar"))
    assert "\n" not in str(e.value)
