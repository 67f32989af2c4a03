"""The jobhost guest SDK for Python: a job is a function ``run(ctx)`` in ``app.py``.

    import jobhost
    from jobhost import db, log

    def run(ctx):
        log.info(f"recording {len(ctx.payload['items'])} items")
        with db.transaction() as tx:   # commits on leaving, rolls back on an exception
            for item in ctx.payload["items"]:
                tx.execute("INSERT INTO demo_items (run_id, item) VALUES ($1, $2)",
                           [ctx.run_id, item])
        return jobhost.DONE

``run`` returns ``jobhost.DONE`` (or ``None``), ``jobhost.Continue(cursor)`` for another
pass, or ``jobhost.Defer(seconds)``. It raises ``jobhost.Failed`` to fail this attempt (it
is retried while retries are left) or ``jobhost.Unrecoverable`` to end the run; a host
refusal raises a ``jobhost.HostError`` (its ``code`` is fixed, see ``host codes``). Any
other exception fails the attempt with ``Name: message (at file:line in function)``, the
innermost frame of the job's own code it passed through; its traceback (and an uncaught
``HostError``'s) goes to the attempt's log. A ``MemoryError`` is not caught: the attempt
traps, and the host reports ``memory_limit`` when the job's memory cap was the cause.

The component holds only the modules imported when it was built: import what the job
needs at the top of ``app.py``, never inside ``run``. A capability the job was not
granted is not in its component at all (``host build`` builds against the grants in
``jobhost.toml``); using it raises ``HostError`` with code ``capability-refused``, which,
uncaught, ends the run (``unrecoverable``: no retry could succeed).
"""

import json as _json
import traceback as _traceback

from componentize_py_types import Err as _Err
import wit_world as _wit_world
from wit_world.exports import handler as _handler
from wit_world.imports import log as _log

# Each capability is in the component only if the job was granted it.
try:
    from wit_world.imports import db as _db
except ImportError:
    _db = None
try:
    from wit_world.imports import files as _files
except ImportError:
    _files = None
try:
    from wit_world.imports import links as _links
except ImportError:
    _links = None
try:
    from wit_world.imports import steps as _steps
except ImportError:
    _steps = None

__all__ = [
    "Context", "Continue", "Defer", "DONE", "Failed", "Unrecoverable", "HostError",
    "LeaseLost", "db", "files", "links", "log", "steps",
]

# Most lines of a traceback put in the attempt's log (its innermost ones).
_TRACEBACK_LINES = 40
# Bytes read per `files.read` call (the host's largest chunk).
_CHUNK = 1 << 20
# Tries `files.read_all` makes when the object is replaced while it reads.
_READ_TRIES = 3


# ---- outcomes and errors -------------------------------------------------------------

class _Done:
    def __repr__(self):
        return "jobhost.DONE"


DONE = _Done()
"""The run is complete."""


class Continue:
    """Run another pass, which gets ``cursor`` (any JSON value) as ``ctx.cursor``."""

    def __init__(self, cursor):
        self.cursor = cursor


class Defer:
    """Run another pass after ``seconds``: a number over 0 and at most 7 days (604800).
    Anything else raises here, where the job made it (``TypeError`` for what is not a
    number, ``ValueError`` for zero, a negative, NaN or too long), rather than reach the
    host as a delay it would refuse (``invalid_defer``)."""

    def __init__(self, seconds):
        _defer_ms(seconds)
        self.seconds = seconds


# The longest defer the host takes, in seconds (the host's `engine::attempt::MAX_DEFER`).
_MAX_DEFER_SECONDS = 604800


def _defer_ms(seconds):
    """``seconds`` as the host's milliseconds (a sub-millisecond delay is 1), checked."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"jobhost.Defer(seconds): seconds is a number, not {type(seconds).__name__}")
    if not 0 < seconds <= _MAX_DEFER_SECONDS:
        raise ValueError(
            f"jobhost.Defer(seconds): seconds is over 0 and at most {_MAX_DEFER_SECONDS} "
            f"(7 days), not {seconds!r}"
        )
    return max(1, round(seconds * 1000))


class Failed(Exception):
    """This attempt failed; the host retries it while the job has retries left."""


class Unrecoverable(Exception):
    """The run cannot succeed; it is never retried."""


class HostError(Exception):
    """The host refused a call. ``code`` is one of ``lease-lost``,
    ``capability-refused``, ``query-refused``, ``invalid``, ``unavailable``, or (from
    ``links.call``) ``rate-limited``: the mount's limits held the call past its
    ``max_wait`` and nothing was sent, so the job usually returns a ``Defer``; ``reason``
    is the host's fixed reason, where it gives one."""

    def __init__(self, code, reason=None):
        self.code = code
        self.reason = reason
        super().__init__(_describe(code, reason))


class LeaseLost(HostError):
    """The attempt lost its lease: nothing it was committing was kept."""

    def __init__(self):
        super().__init__("lease-lost")


class Changed(Exception):
    """``files.read_all`` found the object replaced on every try."""


def _describe(code, reason):
    text = {
        "lease-lost": "lease lost: nothing was committed",
        "capability-refused": "capability refused",
        "query-refused": "query refused",
        "invalid": "invalid call",
        "unavailable": "host unavailable",
        "rate-limited": "rate limited: the mount's limits held the call, nothing was sent",
    }[code]
    return f"{text}: {reason}" if reason is not None else text


def _host_error(value):
    """The exception for a WIT ``host-error``."""
    name = type(value).__name__
    if name == "HostError_LeaseLost":
        return LeaseLost()
    if name == "HostError_Unavailable":
        return HostError("unavailable")
    code = {
        "HostError_CapabilityRefused": "capability-refused",
        "HostError_QueryRefused": "query-refused",
        "HostError_Invalid": "invalid",
    }[name]
    return HostError(code, value.value)


def _call(function, *args):
    """Calls a host function, raising its refusal as a ``HostError``."""
    try:
        return function(*args)
    except _Err as refused:
        raise _host_error(refused.value) from None


def _not_granted(capability):
    refusal = HostError(
        "capability-refused",
        f"the job was not granted `{capability}` when it was built (see jobhost.toml)",
    )
    # No retry can succeed: the capability is not in the component at all. Uncaught, it
    # ends the run (`unrecoverable`), as the host never retries a `capability_refused`.
    refusal._final = True
    return refusal


# ---- the run's context ---------------------------------------------------------------

class Context:
    """Everything a pass knows about its run."""

    def __init__(self, raw):
        self.job = raw.job
        self.run_id = raw.run_id
        self.instance = raw.instance
        self.tenant = raw.tenant
        self.attempt = raw.attempt
        """1-based attempt number within this pass."""
        self.pass_ = raw.pass_
        """1-based pass number within this run."""
        try:
            self.payload = _json.loads(raw.payload)
        except ValueError as e:
            raise Unrecoverable(f"the payload is not JSON: {e}") from None
        self.cursor = None if raw.cursor is None else _json.loads(raw.cursor)
        """What the previous pass gave ``Continue``."""
        self.counters = {c.name: c.value for c in raw.counters}


# ---- log -----------------------------------------------------------------------------

class _Log:
    """Log lines, kept on the attempt's record (bounded by the host)."""

    def trace(self, message):
        _log.write(_log.Level.TRACE, str(message))

    def debug(self, message):
        _log.write(_log.Level.DEBUG, str(message))

    def info(self, message):
        _log.write(_log.Level.INFO, str(message))

    def warn(self, message):
        _log.write(_log.Level.WARN, str(message))

    def error(self, message):
        _log.write(_log.Level.ERROR, str(message))


log = _Log()


# ---- db ------------------------------------------------------------------------------

def _to_value(value):
    if value is None:
        return _db.Value_Null()
    if isinstance(value, bool):
        return _db.Value_Integer(int(value))
    if isinstance(value, int):
        return _db.Value_Integer(value)
    if isinstance(value, float):
        return _db.Value_Real(value)
    if isinstance(value, str):
        return _db.Value_Text(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _db.Value_Blob(bytes(value))
    raise TypeError(f"a statement parameter cannot be a {type(value).__name__}")


def _from_value(value):
    return None if isinstance(value, _db.Value_Null) else value.value


class Rows:
    """A statement's result: ``columns``, and ``rows`` of plain Python values."""

    def __init__(self, raw):
        self.columns = list(raw.columns)
        self.rows = [[_from_value(v) for v in row] for row in raw.rows]

    def __iter__(self):
        return iter(self.rows)

    def __len__(self):
        return len(self.rows)

    def dicts(self):
        """Each row as a dict by column name."""
        return [dict(zip(self.columns, row)) for row in self.rows]


class Transaction:
    """A write transaction, fenced by the attempt's lease. As a context manager it
    commits when the block ends and rolls back when it raises."""

    def __init__(self, raw):
        self._raw = raw

    def _open(self):
        if self._raw is None:
            raise HostError("invalid", "the transaction has ended")
        return self._raw

    def _end(self):
        raw, self._raw = self._raw, None
        return raw

    def query(self, sql, params=()):
        return Rows(_call(self._open().query, sql, [_to_value(p) for p in params]))

    def execute(self, sql, params=()):
        """Runs one statement; returns how many rows it changed."""
        return _call(self._open().execute, sql, [_to_value(p) for p in params])

    def commit(self):
        """Commits if the attempt still holds its lease; ``LeaseLost`` means nothing
        was committed."""
        self._open()
        _call(_db.Transaction.commit, self._end())

    def commit_pass(self, end=DONE):
        """Commits with the pass's end (``DONE`` or ``Continue(cursor)``) and its
        counter changes, all or none. Returns the outcome for ``run`` to return."""
        if _steps is None:
            raise _not_granted("steps")
        if isinstance(end, Continue):
            raw_end = _steps.PassEnd_Continue(_json.dumps(end.cursor))
        elif end is DONE:
            raw_end = _steps.PassEnd_Done()
        else:
            raise TypeError("a pass ends with jobhost.DONE or jobhost.Continue(cursor)")
        self._open()
        _call(_steps.commit_pass, self._end(), raw_end)
        return end

    def rollback(self):
        if self._raw is not None:
            _db.Transaction.rollback(self._end())

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None:
            if self._raw is not None:
                self.commit()
        else:
            self.rollback()
        return False


class _Db:
    """SQL on the tables the job was granted; writes only in a transaction."""

    def query(self, sql, params=()):
        if _db is None:
            raise _not_granted("db")
        return Rows(_call(_db.query, sql, [_to_value(p) for p in params]))

    def begin(self):
        if _db is None:
            raise _not_granted("db")
        return Transaction(_call(_db.begin))

    def transaction(self):
        """``with db.transaction() as tx: ...`` commits at the end of the block."""
        return self.begin()


db = _Db()


# ---- files ---------------------------------------------------------------------------

class _Files:
    """Named objects in the collections the job was granted."""

    def _granted(self):
        if _files is None:
            raise _not_granted("files")
        return _files

    def stat(self, collection, name):
        """The object's metadata (``name``, ``size``, ``digest``, ``created_at``), or None."""
        return _call(self._granted().stat, collection, name)

    def read(self, collection, name, offset=0, length=_CHUNK):
        return bytes(_call(self._granted().read, collection, name, offset, length))

    def read_all(self, collection, name):
        """The whole object as one version (never part of a replaced one), or None."""
        files = self._granted()
        for _ in range(_READ_TRIES):
            version = _call(files.stat_version, collection, name)
            if version is None:
                return None
            data = bytearray()
            try:
                while len(data) < version.metadata.size:
                    chunk = files.read_version(
                        collection, name, version.version, len(data), _CHUNK
                    )
                    if not chunk:
                        break
                    data += chunk
            except _Err as refused:
                if type(refused.value).__name__ == "ReadError_Changed":
                    continue
                raise _host_error(refused.value.value) from None
            return bytes(data)
        raise Changed(f"{collection}/{name} was replaced on every read")

    def list(self, collection, prefix="", cursor=None, limit=100):
        """A page of objects: ``(objects, next_cursor)``."""
        page = _call(self._granted().list_objects, collection, prefix, cursor, limit)
        return list(page.objects), page.next

    def put(self, collection, name, data, tx=None):
        """Writes ``data`` as ``name``: visible once attached, in ``tx`` if given (it
        commits with the transaction) or in a fenced write of its own."""
        files = self._granted()
        upload = _call(files.start_upload, collection)
        view = memoryview(bytes(data))
        for start in range(0, len(view), _CHUNK):
            _call(upload.write, bytes(view[start:start + _CHUNK]))
        if tx is None:
            return _call(files.attach, upload, name)
        return _call(files.attach_in, tx._open(), upload, name)

    def remove(self, collection, name, tx=None):
        """Removes ``name``; whether there was such an object."""
        files = self._granted()
        if tx is None:
            return _call(files.remove, collection, name)
        return _call(files.remove_in, tx._open(), collection, name)


files = _Files()


# ---- links ---------------------------------------------------------------------------

class Response:
    """A mount's answer: ``status``, ``headers`` (pairs), ``body`` (bytes)."""

    def __init__(self, raw):
        self.status = raw.status
        self.headers = list(raw.headers)
        self.body = bytes(raw.body)

    @property
    def ok(self):
        return 200 <= self.status < 300

    def json(self):
        return _json.loads(self.body)

    def text(self):
        return self.body.decode("utf-8", "replace")


class _Links:
    """Calls to the mounts the job was granted; the host adds the credential and an
    ``Idempotency-Key`` derived from the run, the pass and ``step``."""

    def call(self, mount, method, path, *, headers=(), body=b"", json=None, step="",
             action=None):
        if _links is None:
            raise _not_granted("links")
        headers = [(str(k), str(v)) for k, v in dict(headers).items()]
        if json is not None:
            body = _json.dumps(json).encode()
            if not any(k.lower() == "content-type" for k, _ in headers):
                headers.append(("content-type", "application/json"))
        request = _links.Request(method, path, headers, bytes(body), step, action)
        try:
            return Response(_links.send(mount, request))
        except _Err as refused:
            if type(refused.value).__name__ == "CallError_RateLimited":
                raise HostError("rate-limited") from None
            raise _host_error(refused.value.value) from None


links = _Links()


# ---- steps ---------------------------------------------------------------------------

class _Steps:
    """Memoised steps and counters across the attempts of a pass."""

    def _granted(self):
        if _steps is None:
            raise _not_granted("steps")
        return _steps

    def step(self, name, work):
        """``work()``'s result (JSON), recorded after it runs; a later attempt of this
        pass that reaches ``name`` gets the recorded result and does not run it."""
        steps = self._granted()
        recorded = _call(steps.start, name)
        if recorded is not None:
            return _json.loads(recorded)
        value = work()
        _call(steps.record, name, _json.dumps(value))
        return value

    def step_in(self, tx, name, work):
        """As ``step``, but ``work(tx)`` writes through ``tx`` and the result is
        recorded in it: both commit together, or neither."""
        steps = self._granted()
        recorded = _call(steps.start, name)
        if recorded is not None:
            return _json.loads(recorded)
        value = work(tx)
        _call(steps.record_in, tx._open(), name, _json.dumps(value))
        return value

    def counter_add(self, name, delta):
        """Adds ``delta`` to the run's counter ``name`` (committed with the pass's end);
        returns its value with this attempt's changes."""
        return _call(self._granted().counter_add, name, delta)


steps = _Steps()


# ---- the export ----------------------------------------------------------------------

def _outcome(returned):
    if returned is None or returned is DONE:
        return _handler.Outcome_Done()
    if isinstance(returned, Continue):
        return _handler.Outcome_Continue(_json.dumps(returned.cursor))
    if isinstance(returned, Defer):
        return _handler.Outcome_Defer(_defer_ms(returned.seconds))
    raise Failed(
        f"run returned {type(returned).__name__}: return jobhost.DONE, "
        "jobhost.Continue(cursor) or jobhost.Defer(seconds)"
    )


def _log_traceback():
    """Puts the traceback of the exception being handled (its innermost lines) in the log."""
    lines = _traceback.format_exc().rstrip().splitlines()
    if len(lines) > _TRACEBACK_LINES:
        lines = lines[:1] + ["  ..."] + lines[-_TRACEBACK_LINES:]
    log.error("\n".join(lines))


def _where(e):
    """``file:line in function`` of the innermost frame of the job's own code ``e`` passed
    through (not this SDK's, not the standard library's), or None."""
    for frame in reversed(_traceback.extract_tb(e.__traceback__)):
        name = frame.filename
        if name.startswith("<") or "/lib/python" in name or name.endswith("jobhost.py"):
            continue
        if name.startswith("./"):
            name = name[2:]
        elif name.startswith("/"):
            name = name.rsplit("/", 1)[-1]
        return f"{name}:{frame.lineno} in {frame.name}"
    return None


def _with_place(text, e):
    """``text``, then where the job's code raised ``e``, when that is known."""
    where = _where(e)
    return f"{text} (at {where})" if where else text


def handler(run):
    """The component's export for the job function ``run`` (the build wires it)."""

    class Handler(_wit_world.exports.Handler):
        def run(self, raw):
            try:
                return _outcome(run(Context(raw)))
            except Unrecoverable as e:
                raise _Err(_handler.JobError_Unrecoverable(str(e) or "unrecoverable"))
            except Failed as e:
                raise _Err(_handler.JobError_Failed(str(e) or "failed"))
            except HostError as e:
                _log_traceback()
                if getattr(e, "_final", False):
                    raise _Err(_handler.JobError_Unrecoverable(_with_place(str(e), e)))
                raise _Err(_handler.JobError_Failed(_with_place(str(e), e)))
            except MemoryError:
                # The job's memory cap (most likely): escaping the export traps, and the
                # host reports the attempt `memory_limit` (a `failed` would hide why).
                raise
            except BaseException as e:
                _log_traceback()
                raise _Err(_handler.JobError_Failed(_with_place(f"{type(e).__name__}: {e}", e)))

    return Handler
