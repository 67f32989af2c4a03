"""A parent that starts children and waits for them, and the children (one component, two
jobs, told apart by the job's name: a job whose name ends in ``child`` is a child). It does
exactly what the Rust example ``examples/family`` does, payload for payload and log line for
log line, so one test body checks the three languages (``tests/polyglot.rs``).

The parent's payload: ``{"children": n, "in_tx": bool, "fail_after": bool, "wait": "fail" |
"continue" | null, "failing": [i, ...], "wait_ms": m, "detached": bool, "delay_ms": d,
"job": "family-child", "busy_ms": b, "linger_ms": l, "beside": [...], "forks": bool,
"child_writes": w, "child_wait_ms": m, "step": bool}``. Every pass first logs its place in
the run (``jobhost.run.info()``). With ``step`` the first pass reaches the step ``sample``
and logs what it got back, failing its first attempt after it: the value reads the same on
the first run and on the retry, a tuple as a list and the integer key as a string. Then the
first pass waits ``wait_ms``, queues ``n`` runs of ``job`` (payload ``{"n": i, "fail": i in
failing, "busy_ms": b, "writes": w, "wait_ms": m}``, or with ``forks`` its own), in a
transaction that also writes a ``ledger`` row (``in_tx``) or in writes of their own; with
``fail_after`` it then fails. With ``beside`` it makes those calls (``enqueue``, ``kick``,
``emit``, ``result``) outside its open transaction and logs how each was answered. With
``wait`` the pass continues, waiting for its children; the next pass sums their results.
With ``start_key`` it starts two runs of ``job`` under that unique key (``jobs.start``) and
logs what each start answered.

A child writes ``writes`` transactions of one ``ledger`` row each (held open ``wait_ms``),
takes ``busy_ms``, then hands back ``{"n": n}``, or, with ``fail``, fails for good. Needs
``db.write=ledger``, ``steps``, ``jobs`` granting the children and the table from
``examples/migrations``.
"""

import time

import jobhost
from jobhost import db, jobs, log, steps

# Runs queued per call: the host takes at most 1000.
BATCH = 1000


def run(ctx):
    p = ctx.payload
    if ctx.job.endswith("child"):
        return child(ctx, p)
    info = jobhost.run.info()
    log.info(
        f"pass {ctx.pass_} attempt {ctx.attempt}: final={str(info.final_attempt).lower()} "
        f"retries_left={info.retries_left} started_by={started_by(info.started_by)} "
        f"deferrals={info.deferrals}"
    )
    if ctx.pass_ > 1:
        return sum_up()
    if p.get("step", False):
        sample = steps.step("sample", lambda: {"pair": (1, "a"), 3: "three"})
        log.info(f"step sample: {sample!r}")
        if ctx.attempt == 1:
            raise jobhost.Failed("failing after the step")
    start_children(ctx, p)
    if p.get("start_key") is not None:
        start_twice(p["start_key"], p.get("job", "family-child"))
    policy = p.get("wait")
    if policy is None:
        return jobhost.DONE
    jobs.wait_for_children("fail" if policy == "fail" else "continue")
    return jobhost.Continue({})


def started_by(by):
    """What started the run, written as the Rust example's ``{:?}`` writes it."""
    kind = f"StartedBy::{by.kind.capitalize()}"
    if by.value is None:
        return kind
    if isinstance(by.value, int):
        return f"{kind}({by.value})"
    return f'{kind}("{by.value}")'


def child(ctx, p):
    log.info(f"child {p.get('n', 0)}: started_by={started_by(jobhost.run.info().started_by)}")
    for _ in range(p.get("writes", 0)):
        began = int(time.time() * 1000)
        with db.transaction() as tx:
            tx.execute(
                "INSERT INTO ledger (run_id, attempt, n) VALUES ($1, $2, $3)",
                [ctx.run_id, ctx.attempt, began],
            )
            time.sleep(p.get("wait_ms", 0) / 1000)
    time.sleep(p.get("busy_ms", 0) / 1000)
    if p.get("fail", False):
        raise jobhost.Unrecoverable(f"child {p.get('n', 0)} fails")
    jobhost.run.set_result({"n": p.get("n", 0)})
    return jobhost.DONE


def start_children(ctx, p):
    time.sleep(p.get("wait_ms", 0) / 1000)
    job = p.get("job", "family-child")
    failing = p.get("failing", [])

    def new_run(n):
        if p.get("forks", False):
            payload = {"children": p.get("children", 0), "job": job, "forks": True,
                       "detached": p.get("detached", False)}
        else:
            payload = {"n": n, "fail": n in failing, "busy_ms": p.get("busy_ms", 0),
                       "writes": p.get("child_writes", 0), "wait_ms": p.get("child_wait_ms", 0)}
        delay = 0 if n in failing else p.get("delay_ms", 0) / 1000
        return jobs.NewRun(job, payload, jobs.Options(delay=delay, detached=p.get("detached", False)))

    children = p.get("children", 0)
    batches = [[new_run(n) for n in range(start, min(start + BATCH, children))]
               for start in range(0, children, BATCH)]
    if p.get("in_tx", False):
        tx = db.begin()
        tx.execute(
            "INSERT INTO ledger (run_id, attempt, n) VALUES ($1, $2, $3)",
            [ctx.run_id, ctx.attempt, 0],
        )
        for batch in batches:
            jobs.enqueue_all_in(tx, batch)
        for call in p.get("beside", []):
            beside(call, job)
        if p.get("fail_after", False):
            tx.rollback()
            raise jobhost.Failed("failing after queueing, before the commit")
        tx.commit()
    else:
        for batch in batches:
            jobs.enqueue_all(batch)
        if p.get("fail_after", False):
            time.sleep(p.get("linger_ms", 0) / 1000)
            raise jobhost.Failed("failing after queueing")
    log.info(f"started {children} runs of {job}")


def start_twice(key, job):
    """Starts two runs of ``job`` under unique ``key`` (an hour later, one attempt,
    detached) and logs what each start answered."""
    options = jobs.StartOptions(delay=3600, max_attempts=1, detached=True,
                                unique=jobs.Unique(key, hold="until-finished"))
    first = jobs.start(job, {"n": 0}, options)
    again = jobs.start(job, {"n": 1}, options)
    same = str(first.run_id == again.run_id).lower()
    log.info(f"started {key}: {first.outcome} then {again.outcome}, one run: {same}")


def beside(call, job):
    """Makes ``call`` outside the open transaction and logs its answer."""
    try:
        if call == "enqueue":
            answer = f"ok {jobs.enqueue(job, {'n': 0}).run_id}"
        elif call == "kick":
            answer = f"ok {jobs.kick(job)}"
        elif call == "emit":
            answer = f"ok {jobs.emit('nudge', {})}"
        elif call == "result":
            jobhost.run.set_result({"beside": True})
            answer = "ok "
        else:
            answer = "ok unknown call"
    except jobhost.HostError as e:
        answer = str(e)
    log.info(f"beside {call}: {answer}")


def sum_up():
    children = jobhost.run.children()
    succeeded = sum(1 for c in children if c.status == "succeeded")
    total = sum(
        c.result.get("n", 0) if isinstance(c.result, dict) and isinstance(c.result.get("n"), int) else 0
        for c in children
    )
    other = len(children) - succeeded
    log.info(f"children: {succeeded} succeeded, {other} other, sum {total}")
    jobhost.run.set_result({"succeeded": succeeded, "other": other, "sum": total})
    return jobhost.DONE
