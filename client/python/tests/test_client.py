"""ktune.Client against a real ktuned (fake GPU worker, temporary socket and cache)."""

import errno
import os
import threading

import pytest

from conftest import ROOT, SOFTMAX, SOFTMAX_SHAPES

import ktune

RMSNORM = os.path.join(ROOT, "examples", "rmsnorm.json")


def test_connect_without_daemon(tmp_path):
    path = str(tmp_path / "none.sock")
    with pytest.raises(ktune.KtuneError) as e:
        ktune.Client(path)
    assert e.value.errno in (errno.ENOENT, errno.ECONNREFUSED)
    assert path in str(e.value)


def test_submit_wait_lookup(daemon):
    with ktune.Client(daemon["socket"], timeout=30) as c:
        gpus = c.gpus()
        assert len(gpus) == 1 and gpus[0].index == 0 and gpus[0].name, gpus
        assert gpus[0].state in ("idle", "busy")

        g = ktune.Graph(SOFTMAX)
        job = c.submit(g, SOFTMAX_SHAPES, budget=20, priority=5)
        assert job.id > 0 and not job.joined
        assert job.signature == g.signature and job.shapes == SOFTMAX_SHAPES
        assert job.precision == "exact" and job.priority == 5 and job.name == "softmax"

        seen = []
        final = c.wait(job, progress=seen.append)
        assert final.state == "done", final
        assert final.record and final.best_ns and final.family, final
        assert final.ended and final.finished and final.started
        assert seen and seen[-1].state == "done" and all(j.id == job.id for j in seen)

        again = c.submit(SOFTMAX, SOFTMAX_SHAPES, budget=20)  # path, not Graph: same job
        assert again.joined and again.id == job.id and again.state == "done"
        now = c.status(job.id)
        assert (now.id, now.state, now.record, now.best_ns) == (job.id, "done", True,
                                                              final.best_ns)
        assert job.id in [j.id for j in c.jobs()]
        assert [j.id for j in c.jobs(state="done")] == [job.id]
        assert c.jobs(state=["queued", "running"]) == []
        # retune: a new job despite the done one; its trial log read back
        re = c.submit(SOFTMAX, SOFTMAX_SHAPES, budget=5, retune=True)
        assert not re.joined and re.id != job.id
        re = c.wait(re)
        assert re.state == "done" and re.resumed > 0, re
        assert [j.id for j in c.jobs(state="done")] == [re.id, job.id]

        rec = c.lookup(g, SOFTMAX_SHAPES, source=True)
        assert rec is not None and rec.family == final.family, rec
        assert rec.time_ns > 0 and rec.source and "__global__" in rec.source
        assert c.lookup(g, {"M": 8, "N": 8}) is None

        st = c.stats()
        assert st.jobs["done"] == 2 and st.gpus == 1 and st.clients >= 1
        assert st.cache["records"] >= 1 and st.requests > 0

        with pytest.raises(ktune.KtuneError) as e:
            c.cancel(job)
        assert e.value.errno == errno.EINVAL


def test_errors_come_back_with_the_daemon_message(daemon):
    with ktune.Client(daemon["socket"]) as c:
        with pytest.raises(ktune.KtuneError) as e:
            c.status(999999)
        assert e.value.errno == errno.ENOENT and str(e.value)
        with pytest.raises(ktune.KtuneError) as e:
            c.submit(SOFTMAX, {"M": 64})  # N unbound
        assert e.value.errno == errno.EINVAL and "N" in str(e.value)
        with pytest.raises(ValueError, match="precision"):
            c.submit(SOFTMAX, SOFTMAX_SHAPES, precision="fast")
        with pytest.raises(ValueError, match="unknown state"):
            c.jobs(state="finished")
        with pytest.raises(TypeError):
            c.status("7")


@pytest.mark.parametrize("daemon", [200], indirect=True)
def test_cancel_and_priorities(daemon):
    """With slow evaluations: a queued job is cancelled at once; the running one after its
    candidate in flight; an exception in progress() stops the wait."""
    with ktune.Client(daemon["socket"]) as c:
        running = c.submit(SOFTMAX, SOFTMAX_SHAPES, budget=60)
        queued = c.submit(RMSNORM, {"M": 64}, budget=60)
        assert queued.state == "queued", queued  # one GPU, busy with the first job
        cancelled = c.cancel(queued)
        assert cancelled.state == "cancelled", cancelled

        class Stop(Exception):
            pass

        def stop(_job):
            raise Stop()
        with pytest.raises(Stop):
            c.wait(running, progress=stop)
        assert c.status(running).state in ("queued", "running")  # the job goes on

        c.cancel(running)
        final = c.wait(running)
        assert final.state == "cancelled", final


def test_client_is_usable_from_threads(daemon):
    """Calls on one connection from several threads serialise: every reply is whole."""
    errors = []
    with ktune.Client(daemon["socket"]) as c:
        before = c.stats().requests

        def work():
            try:
                last = 0.0
                for _ in range(20):
                    st = c.stats()
                    assert st.cache["path"] == daemon["cache"] and st.uptime_s >= last
                    last = st.uptime_s
                    assert c.jobs() == []
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        ts = [threading.Thread(target=work) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors, errors
        assert c.stats().requests >= before + 4 * 20 * 2


def test_closed_client_raises(daemon):
    c = ktune.Client(daemon["socket"])
    c.close()
    c.close()
    with pytest.raises(ValueError, match="closed"):
        c.stats()


def test_wait_with_tqdm(daemon):
    """Client.wait's progress callback drives a tqdm bar over the budget's seconds."""
    tqdm = pytest.importorskip("tqdm")
    import io
    out = io.StringIO()
    with ktune.Client(daemon["socket"], timeout=30) as c:
        job = c.submit(RMSNORM, {"M": 96}, budget=3)
        with tqdm.tqdm(total=job.budget_s, unit="s", file=out, mininterval=0) as bar:
            final = c.wait(job, progress=lambda j: bar.update(min(j.elapsed_s, bar.total) - bar.n))
        assert final.state == "done", final
        assert bar.n > 0
    assert "s/s" in out.getvalue() or "|" in out.getvalue(), out.getvalue()
