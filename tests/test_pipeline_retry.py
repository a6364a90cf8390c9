"""The one retry helper (issue #28): which errors are transient and the server's own delay are parameters."""

import pytest

from cuvee.pipeline.retry import RetryPolicy


class Busy(Exception):
    def __init__(self, retry_after=None):
        super().__init__("busy")
        self.retry_after = retry_after


def failing(n, exc):
    """A callable that raises ``exc`` on its first ``n`` calls, then returns how many calls it took."""
    calls = []

    def fn():
        calls.append(1)
        if len(calls) <= n:
            raise exc
        return len(calls)

    return fn


def test_transient_errors_are_retried_and_others_raised_at_once():
    policy = RetryPolicy(3, 0.0, transient=lambda e: isinstance(e, Busy))
    seen = []
    assert policy.call(failing(2, Busy()), seen.append) == 3 and len(seen) == 2
    with pytest.raises(KeyError):
        policy.call(failing(1, KeyError("x")), seen.append)
    assert len(seen) == 2  # no retry for a permanent error
    with pytest.raises(Busy):
        policy.call(failing(10, Busy()))  # 1 + 3 attempts, then the last error


def test_server_delay_replaces_the_backoff_and_is_capped():
    policy = RetryPolicy(2, backoff_s=5.0, max_sleep_s=30.0, server_delay=lambda e: getattr(e, "retry_after", None))
    assert policy.delay(0, Busy(retry_after=0.0)) == 0.0
    assert policy.delay(0, Busy(retry_after=500.0)) == 30.0
    assert 5.0 <= policy.delay(0, Busy()) <= 6.25 and 10.0 <= policy.delay(1, Busy()) <= 12.5


def test_remote_reads_keep_their_transient_rule():
    from cuvee.pipeline.remote import RetryPolicy as RemotePolicy

    policy = RemotePolicy(2, 0.0)
    assert isinstance(policy, RetryPolicy)
    with pytest.raises(FileNotFoundError):
        policy.call(failing(1, FileNotFoundError("gone")))
    assert policy.call(failing(1, ConnectionResetError("cut"))) == 2
