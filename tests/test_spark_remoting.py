"""The Spark data source over RocketMQ's remoting protocol in ``local-cluster`` mode: separate
executor processes read ``[start, end)`` offset ranges per (broker, queue) and send batched
writes, against the embedded broker and a real RocketMQ 5.3 (name server + broker).

Each case runs ``spark_cluster_job.py`` as its own Spark application (a process holds one
SparkContext, and the session-wide ``spark`` fixture is ``local[2]``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servers import SCRIPT, Server

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

JOB = Path(__file__).with_name("spark_cluster_job.py")


def _run_job(server: Server, topic: str, group: str, workdir: Path, rows: int, **extra: str) -> Any:
    args = [
        sys.executable,
        str(JOB),
        "--endpoint",
        server.remoting_endpoint,
        "--topic",
        topic,
        "--group",
        group,
        "--workdir",
        str(workdir),
        "--rows",
        str(rows),
    ]
    for k, v in extra.items():
        args += [f"--{k.replace('_', '-')}", v]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent))
    proc = subprocess.run(args, capture_output=True, text=True, timeout=840, env=env, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    report = (
        f"the Spark job failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    )
    assert proc.returncode == 0, report
    assert lines, report
    return json.loads(lines[-1][len("RESULT ") :])


def _check(out: Any, rows: int) -> None:
    read = out["read"]
    assert len(read) == rows
    values = sorted(r[0] for r in read)
    assert values == sorted(f"v{i}" for i in range(rows)), "every row exactly once"
    for v, k, i, tag, _partition, _offset, mid in read:
        n = int(v[1:])
        assert k == f"k{n}"
        assert i == str(n)
        assert tag == ("even" if n % 2 == 0 else "odd")
        assert mid
    assert len({r[6] for r in read}) == rows, "a unique message id per row"
    # One input partition per non-empty (broker, queue): each write task's batches went to a
    # queue of its own, so the read has several ranges for the executors.
    assert out["read_partitions"] >= 2, "reads are split into per-queue ranges"

    first = {int(k): v for k, v in out["stream_first"].items()}
    second = {int(k): v for k, v in out["stream_second"].items()}
    last = out["stream_last"]
    assert sorted(v for b in first.values() for v in b) == sorted(f"v{i}" for i in range(rows))
    assert second[last] == first[last], "the uncommitted batch is replayed exactly"
    merged = {**first, **second}
    total = rows + rows // 2
    assert sorted(v for b in merged.values() for v in b) == sorted(f"v{i}" for i in range(total)), (
        "each row exactly once across the restart"
    )


def test_spark_local_cluster_on_the_embedded_broker(
    make_broker: Callable[..., Any], unique: Callable[[str], str], tmp_path: Path
) -> None:
    from servers import EmbeddedServer

    broker = make_broker(endpoints=2)
    server = EmbeddedServer(broker)
    topic = unique("sc")
    broker.create_topic(topic, "NORMAL", 8)
    out = _run_job(server, topic, unique("g"), tmp_path, 2000)
    _check(out, 2000)


@pytest.mark.rocketmq
def test_spark_local_cluster_on_real_rocketmq(
    rocketmq_server: Any, unique: Callable[[str], str], tmp_path: Path
) -> None:
    server: Server = rocketmq_server
    topic = unique("sc")
    server.setup({topic: "NORMAL"})
    recreate = (
        f"{SCRIPT} mqadmin deleteTopic -t {topic} -c DefaultCluster && "
        f"{SCRIPT} create topic:{topic}:NORMAL"
    )
    out = _run_job(
        server,
        topic,
        unique("g"),
        tmp_path,
        2000,
        recreate_cmd=f"bash -c {json.dumps(recreate)}",
    )
    _check(out, 2000)
    err = out["data_loss_error"]
    assert err is not None
    assert "failOnDataLoss" in err, err
    assert out["after_loss"] == sorted(f"v{i}" for i in range(10))
