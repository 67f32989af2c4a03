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

The SDK has the Rust SDK's capabilities under the same names: ``log``, ``db``, ``files``,
``links`` (``call`` and ``send``), ``iam`` (``issue_membership``, ``revoke_membership``
through a mount), ``steps``, ``jobs`` (``enqueue``, ``enqueue_all``,
``kick``, ``emit``, each with its ``_in`` form inside a transaction, and
``wait_for_children``) and ``run`` (``info``, ``children``, ``set_result``). As the job's
own function is ``run``, reach the last as ``jobhost.run``.

The component holds only the modules imported when it was built: import what the job
needs at the top of ``app.py``, never inside ``run``. A capability the job was not
granted is not in its component at all (``host build`` builds against the grants in
``jobhost.toml``); using it raises ``HostError`` with code ``capability-refused``, which,
uncaught, ends the run (``unrecoverable``: no retry could succeed).
"""

import json as _json
import math as _math
import time as _time
import traceback as _traceback

from componentize_py_types import Err as _Err
import wit_world as _wit_world
from wit_world.exports import handler as _handler
from wit_world.imports import log as _log
from wit_world.imports import run as _run

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
try:
    from wit_world.imports import jobs as _jobs
except ImportError:
    _jobs = None

__all__ = [
    "Context", "Continue", "Defer", "DONE", "Failed", "Unrecoverable", "HostError",
    "LeaseLost", "Retry", "IamError", "MembershipLink", "db", "files", "iam", "jobs", "links",
    "log", "run", "steps",
]

# Most lines of a traceback put in the attempt's log (its innermost ones).
_TRACEBACK_LINES = 40
# Bytes read per `files.read` call (the host's largest chunk).
_CHUNK = 1 << 20
# Tries `files.read_all` makes when the object is replaced while it reads.
_READ_TRIES = 3
# Children `run.children` reads per host call (the host's largest page).
_CHILD_PAGE = 1000


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
    ``links.send``) ``rate-limited``: the mount's limits held the call past its
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
    """``files.read_version`` found the name pointing at another object, or
    ``files.read_all`` on every try."""


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

    def stat_version(self, collection, name):
        """The object ``name`` points at (``metadata``) and its ``version``, for
        ``read_version``; or None."""
        return _call(self._granted().stat_version, collection, name)

    def read_version(self, collection, name, version, offset=0, length=_CHUNK):
        """Up to ``length`` bytes of ``version`` of ``name``, from ``offset``; raises
        ``Changed`` once the name points at another object (or none): every chunk read
        with one version is the same object's."""
        try:
            return bytes(self._granted().read_version(collection, name, version, offset, length))
        except _Err as refused:
            raise _read_error(refused.value, collection, name) from None

    def read_all(self, collection, name):
        """The whole object as one version (never part of a replaced one), or None."""
        for _ in range(_READ_TRIES):
            version = self.stat_version(collection, name)
            if version is None:
                return None
            data = bytearray()
            try:
                while len(data) < version.metadata.size:
                    chunk = self.read_version(collection, name, version.version, len(data))
                    if not chunk:
                        break
                    data += chunk
            except Changed:
                continue
            return bytes(data)
        raise Changed(f"{collection}/{name} was replaced on every read")

    def list(self, collection, prefix="", cursor=None, limit=100):
        """A page of objects: ``(objects, next_cursor)``."""
        page = _call(self._granted().list_objects, collection, prefix, cursor, limit)
        return list(page.objects), page.next

    def upload(self, collection):
        """Starts writing an object into ``collection``: an ``Upload``, invisible until
        attached. Start it before a transaction's first statement if it is to be
        attached in that transaction (on SQLite the transaction holds the one write
        lock, and the upload is refused ``invalid``, ``transaction-open``)."""
        return Upload(_call(self._granted().start_upload, collection))

    def put(self, collection, name, data, tx=None):
        """Writes ``data`` as ``name``: visible once attached, in ``tx`` if given (it
        commits with the transaction) or in a fenced write of its own."""
        upload = self.upload(collection)
        upload.write(data)
        if tx is None:
            return upload.attach(name)
        return upload.attach_in(tx, name)

    def remove(self, collection, name, tx=None):
        """Removes ``name``, in ``tx`` if given; whether there was such an object."""
        files = self._granted()
        if tx is None:
            return _call(files.remove, collection, name)
        return _call(files.remove_in, tx._open(), collection, name)

    def remove_in(self, tx, collection, name):
        """Removes ``name`` when ``tx`` commits; whether there was such an object."""
        return self.remove(collection, name, tx)

    @property
    def scan(self):
        """For a collection's scan job (granted ``files.scan``)."""
        self._granted()
        return _scan


class Upload:
    """An object being written: invisible until attached to its name; dropped
    unattached, it is discarded."""

    def __init__(self, raw):
        self._raw = raw

    def _take(self):
        raw, self._raw = self._raw, None
        if raw is None:
            raise HostError("invalid", "the upload has ended")
        return raw

    def write(self, data):
        """Appends ``data`` (bytes), sent in chunks of at most 1 MiB."""
        if self._raw is None:
            raise HostError("invalid", "the upload has ended")
        view = memoryview(bytes(data))
        for start in range(0, len(view), _CHUNK):
            _call(self._raw.write, bytes(view[start:start + _CHUNK]))

    def attach(self, name):
        """Makes it visible as ``name``, in a fenced write of its own; ``LeaseLost``
        means it never became visible. Its metadata."""
        return _call(_files.attach, self._take(), name)

    def attach_in(self, tx, name):
        """Makes it visible as ``name`` when ``tx`` commits, and never otherwise."""
        return _call(_files.attach_in, tx._open(), self._take(), name)


class _Scan:
    """A scan job's calls: files of every tenant waiting for a verdict."""

    def pending(self, collection, limit=100):
        """Files waiting for a verdict (``id``, ``tenant``, ``name``, ``size``)."""
        return list(_call(_files.scan_pending, collection, limit))

    def read(self, collection, id, offset=0, length=_CHUNK):
        """Up to ``length`` bytes of a waiting file, from ``offset``."""
        return bytes(_call(_files.scan_read, collection, id, offset, length))

    def mark(self, collection, id, verdict):
        """Marks a waiting file ``"clean"`` (visible to its tenant) or ``"rejected"``."""
        verdicts = {"clean": _files.Verdict.CLEAN, "rejected": _files.Verdict.REJECTED}
        if verdict not in verdicts:
            raise ValueError(f'a verdict is "clean" or "rejected", not {verdict!r}')
        _call(_files.scan_mark, collection, id, verdicts[verdict])


_scan = _Scan()


def _read_error(value, collection, name):
    """The exception for a WIT ``read-error``."""
    if type(value).__name__ == "ReadError_Changed":
        return Changed(f"{collection}/{name} was replaced while it was read")
    return _host_error(value.value)


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
    ``Idempotency-Key`` derived from the run, the pass and ``step``.

    Both take ``headers`` (a dict or pairs), ``body`` (bytes) or ``json`` (any JSON value,
    sent with ``content-type: application/json`` unless given), ``step`` (names the call
    within the pass, for its idempotency key) and ``action`` (one of the job's declared
    actions), and give a ``Response`` whatever its status."""

    def _request(self, method, path, headers, body, json, step, action):
        headers = [(str(k), str(v)) for k, v in dict(headers).items()]
        if json is not None:
            body = _json.dumps(json).encode()
            if not any(k.lower() == "content-type" for k, _ in headers):
                headers.append(("content-type", "application/json"))
        return _links.Request(method, path, headers, bytes(body), step, action)

    def call(self, mount, method, path, *, headers=(), body=b"", json=None, step="",
             action=None):
        """One call; the mount's ``rate`` and ``concurrency`` limits answer
        ``unavailable`` here (``send`` tells them apart)."""
        if _links is None:
            raise _not_granted("links")
        request = self._request(method, path, headers, body, json, step, action)
        return Response(_call(_links.call, mount, request))

    def send(self, mount, method, path, *, headers=(), body=b"", json=None, step="",
             action=None):
        """``call``, with the mount's limits raised as a ``HostError`` of code
        ``rate-limited``: nothing was sent, and the job usually returns a ``Defer``."""
        if _links is None:
            raise _not_granted("links")
        request = self._request(method, path, headers, body, json, step, action)
        try:
            return Response(_links.send(mount, request))
        except _Err as refused:
            if type(refused.value).__name__ == "CallError_RateLimited":
                raise HostError("rate-limited") from None
            raise _host_error(refused.value.value) from None


links = _Links()


# ---- iam -----------------------------------------------------------------------------

class IamError(Failed):
    """Why IAM did not issue or revoke a link, as a fixed ``code``: ``unauthorized`` (IAM
    refused the job's credential or its action: 401, 403), ``unavailable`` (IAM or the way
    to it is down: 5xx, unreachable) or ``refused`` (any other answer; ``status`` says
    which). Uncaught, it fails the attempt with ``iam: CODE``, as the Rust SDK's does; a
    host refusal is raised as the ``HostError`` it is."""

    def __init__(self, code, status=None):
        super().__init__(f"iam: {code}")
        self.code = code
        self.status = status


class MembershipLink:
    """An issued link: ``id``, ``url`` and ``expires_at`` (seconds since the Unix epoch)."""

    def __init__(self, id, url, expires_at):
        self.id = id
        self.url = url
        self.expires_at = expires_at

    def __repr__(self):
        return f"MembershipLink(id={self.id!r}, url={self.url!r}, expires_at={self.expires_at})"


class _Iam:
    """Membership links issued by an IAM service through a mount, with the job's own
    workload credential (the host's per-attempt token): an expiring, revocable link that
    grants a role in one container of a dimension. The service answers ``POST
    memberships`` with ``{dimension, container, role, expires_in_s}`` by ``201 {id, url,
    expires_at}`` and ``DELETE memberships/{id}`` by ``204``; the calls name the actions
    ``membership.issue`` and ``membership.revoke``, which the job must declare."""

    @staticmethod
    def _answer(mount, method, path, expected, step, action, json=None):
        try:
            response = links.call(mount, method, path, json=json, step=step, action=action)
        except HostError as e:
            if e.code == "unavailable":
                raise IamError("unavailable") from None
            raise
        if response.status == expected:
            return response
        if response.status in (401, 403):
            raise IamError("unauthorized", response.status)
        if response.status >= 500:
            raise IamError("unavailable", response.status)
        raise IamError("refused", response.status)

    def issue_membership(self, mount, dimension, container, role, expires_in_s=3600,
                         step="issue"):
        """Issues a link granting ``role`` in ``container`` of ``dimension`` for
        ``expires_in_s`` seconds; ``step`` names the call within the pass."""
        request = {"dimension": dimension, "container": container, "role": role,
                   "expires_in_s": expires_in_s}
        response = self._answer(mount, "POST", "memberships", 201, step, "membership.issue",
                                json=request)
        try:
            link = response.json()
            return MembershipLink(str(link["id"]), str(link["url"]), int(link["expires_at"]))
        except (ValueError, KeyError, TypeError):
            raise IamError("refused", response.status) from None

    def revoke_membership(self, mount, id, step="revoke"):
        """Revokes the link ``id``."""
        self._answer(mount, "DELETE", f"memberships/{id}", 204, step, "membership.revoke")


iam = _Iam()


# ---- steps ---------------------------------------------------------------------------

# The integers the host keeps as integers (serde_json's i64 and u64); it stores any other
# as a float.
_HOST_INTEGERS = range(-(1 << 63), 1 << 64)


def _host_int(digits):
    number = int(digits)
    return number if number in _HOST_INTEGERS else float(digits)


def _host_object(pairs):
    """An object as the host stores it: its keys in order."""
    return dict(sorted(pairs, key=lambda pair: pair[0]))


def _as_recorded(value, what):
    """The JSON text to record for ``value``, and the value read back as a replay reads the
    host's record of it: the first run returns what a replay decodes (a tuple as a list, an
    integer key as a string, keys in order), and a value JSON cannot hold (NaN, a set)
    fails before anything is recorded."""
    try:
        text = _json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what} is not JSON: {e}") from None
    return text, _json.loads(text, object_pairs_hook=_host_object, parse_int=_host_int)


class Retry:
    """How ``steps.step_with`` retries: up to ``attempts`` tries in all (at least one),
    sleeping ``backoff`` seconds after the first failure and twice as long after each
    next one. Only ``Failed`` and ``HostError`` are retried; the sleeps count against the
    attempt's deadline."""

    def __init__(self, attempts, backoff=0.0):
        if isinstance(attempts, bool) or not isinstance(attempts, int):
            raise TypeError(f"Retry(attempts): attempts is a whole number, not {attempts!r}")
        if isinstance(backoff, bool) or not isinstance(backoff, (int, float)) \
                or not _math.isfinite(backoff) or backoff < 0:
            raise ValueError(f"Retry(backoff): backoff is seconds, at least 0, not {backoff!r}")
        self.attempts = attempts
        self.backoff = backoff

    def _run(self, name, work):
        tries, delay = 1, self.backoff
        while True:
            try:
                return work()
            except (Failed, HostError) as e:
                if tries >= self.attempts or getattr(e, "_final", False):
                    raise
                log.debug(f"step {name}: try {tries} failed ({e}), again in {delay}s")
                _time.sleep(delay)
                delay *= 2
                tries += 1


class _Steps:
    """Memoised steps and counters across the attempts of a pass.

    A step's result goes through JSON on every run, the first as a replay: what ``work``
    returns is recorded as JSON and read back as the host keeps it, so a tuple comes back
    a list, an integer key a string and a dict's keys in order on the first run as on a
    resume."""

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
        text, value = _as_recorded(work(), f"step {name}'s result")
        _call(steps.record, name, text)
        return value

    def step_in(self, tx, name, work):
        """As ``step``, but ``work(tx)`` writes through ``tx`` and the result is
        recorded in it: both commit together, or neither."""
        steps = self._granted()
        recorded = _call(steps.start, name)
        if recorded is not None:
            return _json.loads(recorded)
        text, value = _as_recorded(work(tx), f"step {name}'s result")
        _call(steps.record_in, tx._open(), name, text)
        return value

    def step_with(self, name, retry, work):
        """As ``step``, trying ``work()`` as ``retry`` (a ``Retry``) says within this
        attempt: a step's name is reached once per attempt, so retrying it means
        retrying inside it."""
        return self.step(name, lambda: retry._run(name, work))

    def counter_add(self, name, delta):
        """Adds ``delta`` to the run's counter ``name`` (committed with the pass's end);
        returns its value with this attempt's changes."""
        return _call(self._granted().counter_add, name, delta)


steps = _Steps()


# ---- jobs ----------------------------------------------------------------------------

def _payload_text(payload):
    """A payload as JSON text; one JSON cannot hold is refused as the Rust SDK does."""
    try:
        return _json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError):
        raise HostError("invalid", "invalid-payload") from None


class Options:
    """How a run is queued; the default: due now, an instance of its own, attached to
    its parent (waited for, and cancelled with it). ``instance``: runs of one job and
    instance never overlap; ``delay``: seconds from now; ``priority``: claimed as though
    due this many seconds earlier (-3600 to 3600); ``dedup_key``: one run per job, tenant
    and key; ``detached``: neither waited for nor cancelled with its parent."""

    def __init__(self, instance=None, delay=0, priority=0, dedup_key=None, detached=False):
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) \
                or not _math.isfinite(delay) or delay < 0:
            raise ValueError(f"Options(delay): delay is seconds, at least 0, not {delay!r}")
        self.instance = instance
        self.delay = delay
        self.priority = priority
        self.dedup_key = dedup_key
        self.detached = detached

    def _raw(self):
        return _jobs.Options(
            self.instance, round(self.delay * 1000), self.priority, self.dedup_key,
            bool(self.detached),
        )


class NewRun:
    """One run of a batch for ``jobs.enqueue_all``: its job, payload and ``Options``."""

    def __init__(self, job, payload, options=None):
        self.job = job
        self.payload = payload
        self.options = options


def _raw_options(options):
    return (options or Options())._raw()


def _raw_runs(runs):
    return [
        _jobs.NewRun(run.job, _payload_text(run.payload), _raw_options(run.options))
        for run in runs
    ]


_HOLDS = ("queued", "active", "until-finished")
_ON_CONFLICT = ("keep", "replace", "debounce")


def _millis(seconds, what):
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or not _math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{what} is seconds, at least 0, not {seconds!r}")
    return round(seconds * 1000)


class Unique:
    """One run per job, tenant and ``key`` while the key holds (WIT 0.1.7): ``hold`` is
    ``"queued"``, ``"active"``, ``"until-finished"`` or a period in seconds (at most a
    year); a start whose key is held does as ``on_conflict`` says: ``"keep"`` (joins the
    run), ``"replace"`` (its payload) or ``"debounce"`` (its due time), the last two only
    while the run has not started."""

    def __init__(self, key, hold="until-finished", on_conflict="keep"):
        if hold not in _HOLDS and (isinstance(hold, str) or _millis(hold, "Unique(hold)") <= 0):
            raise ValueError(f"Unique(hold) is one of {_HOLDS} or seconds over 0, not {hold!r}")
        if on_conflict not in _ON_CONFLICT:
            raise ValueError(f"Unique(on_conflict) is one of {_ON_CONFLICT}, not {on_conflict!r}")
        self.key = key
        self.hold = hold
        self.on_conflict = on_conflict

    def _raw(self):
        hold = {
            "queued": _jobs.Hold_Queued,
            "active": _jobs.Hold_Active,
            "until-finished": _jobs.Hold_UntilFinished,
        }.get(self.hold) if isinstance(self.hold, str) else None
        raw_hold = hold() if hold else _jobs.Hold_Period(_millis(self.hold, "Unique(hold)"))
        on_conflict = getattr(_jobs.OnConflict, self.on_conflict.upper())
        return _jobs.Unique(str(self.key), raw_hold, on_conflict)


class StartOptions:
    """How a run is started (WIT 0.1.7), checked as an API start's options are; the
    default: due now, an instance of its own, its job's attempts, attached to its
    parent. ``run_at``: due at this time, seconds since the epoch (``time.time()``'s);
    not with a ``delay`` (seconds from now); ``priority``: -3600 to 3600;
    ``max_attempts``: 1 to the job's ``retries`` + 1; ``unique``: a ``Unique``;
    ``instance`` and ``detached`` as ``Options``'."""

    def __init__(self, instance=None, run_at=None, delay=0, priority=0, max_attempts=None,
                 unique=None, detached=False):
        self.instance = instance
        self.run_at = None if run_at is None else _millis(run_at, "StartOptions(run_at)")
        self.delay = _millis(delay, "StartOptions(delay)")
        self.priority = priority
        self.max_attempts = max_attempts
        self.unique = unique
        self.detached = detached

    def _raw(self):
        return _jobs.StartOptions(
            self.instance, self.run_at, self.delay, self.priority, self.max_attempts,
            None if self.unique is None else self.unique._raw(), bool(self.detached),
        )


class NewStart:
    """One run of a batch for ``jobs.start_all``: its job, payload and ``StartOptions``."""

    def __init__(self, job, payload, options=None):
        self.job = job
        self.payload = payload
        self.options = options


class Started:
    """What a start did: ``run_id`` names the run, ``outcome`` is ``"created"``,
    ``"joined"``, ``"replaced"``, ``"debounced"`` or ``"dropped"`` (its job's
    ``max_per_tenant`` skipped it at once)."""

    def __init__(self, raw):
        self.run_id = raw.run_id
        self.outcome = raw.outcome.name.lower()

    def __repr__(self):
        return f"Started(run_id={self.run_id!r}, outcome={self.outcome!r})"


def _raw_starts(runs):
    return [
        _jobs.NewStart(run.job, _payload_text(run.payload),
                       (run.options or StartOptions())._raw())
        for run in runs
    ]


_WAIT_POLICIES = ("fail", "continue")


class _Jobs:
    """Starting the jobs the manifest granted (``grants.jobs``), and waiting for them.
    Each call queues in a fenced write of its own; its ``_in`` form queues inside ``tx``,
    so the runs exist once ``tx`` commits, and never otherwise. Each returns an
    ``Enqueued`` (``run_id``, ``duplicate``), a ``Started`` (``start``: ``run_id``,
    ``outcome``), a list of them, a run id (``kick``) or a count of runs (``emit``)."""

    Options = Options
    NewRun = NewRun
    StartOptions = StartOptions
    Unique = Unique
    NewStart = NewStart

    def _granted(self):
        if _jobs is None:
            raise _not_granted("jobs")
        return _jobs

    def enqueue(self, job, payload, options=None):
        """Queues a run of ``job`` with ``payload`` (any JSON value)."""
        jobs = self._granted()
        return _call(jobs.enqueue, job, _payload_text(payload), _raw_options(options))

    def enqueue_in(self, tx, job, payload, options=None):
        jobs = self._granted()
        payload = _payload_text(payload)
        return _call(jobs.enqueue_in, tx._open(), job, payload, _raw_options(options))

    def enqueue_all(self, runs):
        """Queues up to 1000 runs (``NewRun``s) in one fenced write: all, or none."""
        jobs = self._granted()
        return list(_call(jobs.enqueue_all, _raw_runs(runs)))

    def enqueue_all_in(self, tx, runs):
        jobs = self._granted()
        return list(_call(jobs.enqueue_all_in, tx._open(), _raw_runs(runs)))

    def start(self, job, payload, options=None):
        """Starts a run of ``job`` with ``payload`` and ``StartOptions`` (WIT 0.1.7); a
        ``Started``."""
        jobs = self._granted()
        payload, raw = _payload_text(payload), (options or StartOptions())._raw()
        return Started(_call(jobs.start, job, payload, raw))

    def start_in(self, tx, job, payload, options=None):
        jobs = self._granted()
        payload, raw = _payload_text(payload), (options or StartOptions())._raw()
        return Started(_call(jobs.start_in, tx._open(), job, payload, raw))

    def start_all(self, runs):
        """Starts up to 1000 runs (``NewStart``s) in one fenced write: all, or none."""
        jobs = self._granted()
        return [Started(s) for s in _call(jobs.start_all, _raw_starts(runs))]

    def start_all_in(self, tx, runs):
        jobs = self._granted()
        return [Started(s) for s in _call(jobs.start_all_in, tx._open(), _raw_starts(runs))]

    def kick(self, job):
        """Kicks ``job``; the id of the run it queued."""
        return _call(self._granted().kick, job)

    def kick_in(self, tx, job):
        return _call(self._granted().kick_in, tx._open(), job)

    def emit(self, event, payload):
        """Emits ``event`` (granted as ``event:NAME``) with ``payload``; how many runs
        it queued."""
        return _call(self._granted().emit, event, _payload_text(payload))

    def emit_in(self, tx, event, payload):
        return _call(self._granted().emit_in, tx._open(), event, _payload_text(payload))

    def wait_for_children(self, policy):
        """Makes this pass's ``Continue`` (or ``Defer``) wait until every child it
        started ended: with ``"fail"`` the first child that fails fails the run
        (``child_failed``); with ``"continue"`` the next pass runs however each ended,
        and reads how with ``jobhost.run.children()``."""
        jobs = self._granted()
        if policy not in _WAIT_POLICIES:
            raise ValueError(f'a wait policy is "fail" or "continue", not {policy!r}')
        raw = jobs.WaitPolicy.FAIL if policy == "fail" else jobs.WaitPolicy.CONTINUE
        _call(jobs.wait_for_children, raw)


jobs = _Jobs()


# ---- run -----------------------------------------------------------------------------

class StartedBy:
    """What started the run: ``kind`` is ``schedule``, ``kick``, ``event``, ``start``,
    ``retry``, ``boot``, ``parent`` or ``manual``; ``value`` the schedule's due time (ms
    since the Unix epoch), the event's name, or the id of the run retried or of the
    parent, else None."""

    def __init__(self, raw):
        self.kind = type(raw).__name__.removeprefix("StartedBy_").lower()
        self.value = getattr(raw, "value", None)

    def __repr__(self):
        return f"StartedBy({self.kind!r}, {self.value!r})"


class RunInfo:
    """This attempt's place in its run: ``final_attempt`` (failing it fails the run),
    ``retries_left`` (attempts of this pass left after this one), ``started_by`` (a
    ``StartedBy``) and ``deferrals`` (the passes that ended in ``Defer`` so far)."""

    def __init__(self, raw):
        self.final_attempt = raw.final_attempt
        self.retries_left = raw.retries_left
        self.started_by = StartedBy(raw.started_by)
        self.deferrals = raw.deferrals


class Child:
    """How a child the previous pass waited for ended: ``run_id``, ``job``,
    ``instance``, ``status`` (``succeeded``, ``failed``, ``cancelled``, ``skipped`` or
    ``crashed``), ``code`` (its failure code, else None) and ``result`` (the value it
    handed back with ``set_result``, decoded; None if none)."""

    def __init__(self, raw):
        self.run_id = raw.run_id
        self.job = raw.job
        self.instance = raw.instance
        self.status = raw.status
        self.code = raw.code
        self.result = None if raw.result is None else _json.loads(raw.result)


class Signal:
    """Where a signal stands for this pass: ``state`` is ``received`` (``id`` and
    ``payload``, decoded, are set: every attempt of the pass reads this same one),
    ``timed-out`` (the previous pass waited for it and the timeout came first) or
    ``pending`` (not received, and not waited for)."""

    def __init__(self, raw):
        kind = type(raw).__name__.removeprefix("SignalState_")
        self.state = {"Received": "received", "TimedOut": "timed-out"}.get(kind, "pending")
        received = raw.value if self.state == "received" else None
        self.id = None if received is None else received.id
        self.payload = None if received is None else _json.loads(received.payload)

    def __repr__(self):
        return f"Signal({self.state!r}, {self.id!r})"


class _Run:
    """What an attempt knows about its run, the children its previous pass waited for,
    the value it hands a waiting parent, and the signals it waits for. Every job has
    it."""

    def info(self):
        """This attempt's place in its run: a ``RunInfo``."""
        return RunInfo(_run.info())

    def children(self):
        """Every child the previous pass started and waited for (``Child``s, in run id
        order); none when it did not wait."""
        found, cursor = [], None
        while True:
            page = _call(_run.children, cursor, _CHILD_PAGE)
            found.extend(Child(c) for c in page.children)
            if page.next is None:
                return found
            cursor = page.next

    def set_result(self, value):
        """Hands ``value`` (any JSON value, at most 4 KiB of it) to a parent that waits
        for this run, in a fenced write of its own."""
        try:
            text = _json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise HostError("invalid", "invalid-result") from None
        _call(_run.set_result, text)

    def wait_for_signal(self, name, timeout_ms):
        """Makes this pass's ``Continue`` (or ``Defer``) wait for the signal ``name``: the
        run sleeps, holding no worker, until it is sent (``POST
        /runs/{id}/signals/{name}``, ``host runs signal``) or was already, or
        ``timeout_ms`` (at most a year) after the pass ended; the next pass reads it with
        ``signal``. A pass waits for one thing: not also for its children."""
        _call(_run.wait_for_signal, name, int(timeout_ms))

    def signal(self, name):
        """The signal ``name`` for this pass, a ``Signal``: the first one sent and not
        read by an earlier pass, or whether the previous pass's wait timed out."""
        return Signal(_call(_run.signal, name))


run = _Run()


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
